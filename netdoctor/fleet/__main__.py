"""`python -m netdoctor.fleet`: the fleet commands alone (the zipapp and tests use `netdoctor fleet`)."""

from netdoctor.cli import exit_guarded


def _fleet() -> int:
    from netdoctor.fleet.cli import main

    return main()


exit_guarded(_fleet)
