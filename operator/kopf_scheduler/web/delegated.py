"""Who may read the metrics port: delegated authentication and authorization, as kube-scheduler does it.

kube-scheduler hands both questions to the API server (``k8s.io/apiserver`` ``DelegatingAuthenticationOptions``
and ``DelegatingAuthorizationOptions``, defaults kept by ``cmd/kube-scheduler``):

- **authentication**: a bearer token is checked with a TokenReview; a request without one is
  ``system:anonymous`` (group ``system:unauthenticated``); a token the API server rejects is a 401. Results,
  accepted or rejected, are cached for 10 s.
- **authorization**: ``/healthz``, ``/readyz`` and ``/livez`` are always allowed (``--authorization-always-
  allow-paths``; a trailing ``*`` matches a prefix), so is the group ``system:masters``; everything else is a
  SubjectAccessReview of the non-resource URL with the lower-cased HTTP method as the verb (``get
  /metrics``, ``get /explain/ns/pod``, which RBAC's ``/explain/*`` grants). Allow and deny are cached 10 s.

Requests through the API server's aggregation layer carry the user in the front proxy's headers
(:mod:`.requestheader`); requests to an aggregated API's resource are authorized by a SubjectAccessReview of
its ``resourceAttributes`` (:meth:`DelegatedAuth.authorize_resource`), as the API server authorized them
before proxying. Client certificates signed by the cluster's client CA (upstream authenticates them too) are not
accepted directly: use a token, or go through the API server. The two review calls go through a ``post``
callable, so this module needs no HTTP client.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

#: Upstream's ``AlwaysAllowPaths`` and ``AlwaysAllowGroups`` defaults.
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
ALWAYS_ALLOW_GROUPS = ("system:masters",)
#: Upstream's ``CacheTTL`` (authentication) and ``AllowCacheTTL``/``DenyCacheTTL`` (authorization).
CACHE_TTL = 10.0
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Post = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
#: A review's attributes, hashable for the decision cache: ``(("nonResourceAttributes", (("path", p), ...)),)``.
_Attributes = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
K = TypeVar("K")
V = TypeVar("V")


class Unauthenticated(Exception):
    """The token was rejected, or could not be reviewed: a 401."""


class ReviewFailed(Exception):
    """The API server could not answer a SubjectAccessReview: a 500, never an allow."""


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())


ANONYMOUS = UserInfo("system:anonymous", groups=("system:unauthenticated",))


@dataclass(frozen=True)
class ResourceAttributes:
    """A SubjectAccessReview's ``resourceAttributes`` (empty fields are left out)."""

    verb: str
    group: str
    version: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class _TTLCache(Generic[K, V]):
    """A bounded map whose entries expire ``ttl`` seconds after they were put (oldest evicted first)."""

    def __init__(self, ttl: float, clock: Callable[[], float], max_entries: int) -> None:
        self._ttl, self._clock, self._max = ttl, clock, max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


class DelegatedAuth:
    """Authenticates a request's ``Authorization`` header and authorizes a (user, verb, path)."""

    def __init__(
        self,
        post: Post,
        *,
        always_allow_paths: Iterable[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        ttl: float = CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 4096,
    ) -> None:
        self._post = post
        paths = list(always_allow_paths)
        self._exact = frozenset(p for p in paths if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in paths if p.endswith("*"))
        #: sha256(token) → its user, or False when the API server rejected it (rejections are cached too).
        self._tokens: _TTLCache[str, UserInfo | bool] = _TTLCache(ttl, clock, max_entries)
        self._decisions: _TTLCache[tuple[UserInfo, _Attributes], Decision] = _TTLCache(ttl, clock, max_entries)

    async def authenticate(self, authorization: str | None) -> UserInfo:
        """The user behind the header: anonymous without a bearer token; :class:`Unauthenticated` if rejected."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return ANONYMOUS
        token = token.strip()
        if not token:
            raise Unauthenticated("empty bearer token")
        key = hashlib.sha256(token.encode()).hexdigest()  # the cache keeps no token, as upstream's
        cached = self._tokens.get(key)
        if cached is None:
            cached = await self._review_token(token) or False
            self._tokens.put(key, cached)
        if not isinstance(cached, UserInfo):
            raise Unauthenticated("token rejected")
        return cached

    async def _review_token(self, token: str) -> UserInfo | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            review = await self._post(TOKEN_REVIEWS, body)
        except Exception as e:  # not cached: the next request asks again
            raise Unauthenticated(f"token review failed: {e}") from e
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = tuple(sorted((k, tuple(v or ())) for k, v in (user.get("extra") or {}).items()))
        return UserInfo(user.get("username", ""), user.get("uid", ""), tuple(user.get("groups") or ()), extra)

    async def authorize(self, user: UserInfo, verb: str, path: str) -> Decision:
        """May ``user`` ``verb`` the non-resource URL ``path``."""
        if path in self._exact or any(path.startswith(p) for p in self._prefixes):
            return Decision(True)
        return await self._decide(user, (("nonResourceAttributes", (("path", path), ("verb", verb))),))

    async def authorize_resource(self, user: UserInfo, attributes: ResourceAttributes) -> Decision:
        """May ``user`` do what ``attributes`` say (an aggregated API's resource request: ``get`` of one object)."""
        fields = tuple((k, v) for k, v in dataclasses.asdict(attributes).items() if v)
        return await self._decide(user, (("resourceAttributes", fields),))

    async def _decide(self, user: UserInfo, attributes: _Attributes) -> Decision:
        if any(group in ALWAYS_ALLOW_GROUPS for group in user.groups):
            return Decision(True)
        key = (user, attributes)
        decision = self._decisions.get(key)
        if decision is None:
            decision = await self._review_access(user, attributes)
            self._decisions.put(key, decision)
        return decision

    async def _review_access(self, user: UserInfo, attributes: _Attributes) -> Decision:
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        for kind, fields in attributes:
            spec[kind] = dict(fields)
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            review = await self._post(SUBJECT_ACCESS_REVIEWS, body)
        except Exception as e:
            raise ReviewFailed(str(e)) from e
        status = review.get("status") or {}
        return Decision(bool(status.get("allowed")) and not status.get("denied"), status.get("reason", ""))
