"""Fleet view: sweep many nodes through a parallel shell and judge them together.

`collect` turns pdsh/clush/srun output or saved JSON reports into one `NodeSummary` per
host (streaming: only summaries are kept), `outliers` flags nodes far from the fleet
median, `report` assembles the `netdoctor.fleet/1` report, `render` prints it as text,
JSON or a self-contained HTML page, and `sweep` runs the parallel shell.
"""
