"""The daemon beside slurmctld: places the jobs job_submit.lua held for it (and, later, resizes
elastic jobs). One loop, woken by events from its spool directory, with a slow poll as safety net."""
