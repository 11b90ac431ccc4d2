"""Example third-party plugins for kopf-scheduler, registered through the ``kopf_scheduler.plugins`` entry points."""
