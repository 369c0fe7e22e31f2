"""The ledger: every string slurm-liquid writes into a Slurm field, one codec each.

| codec | field | who writes it | trusted? |
|---|---|---|---|
| `Tag` (tag.py) | AdminComment | job_submit.lua (inside slurmctld), the daemon | yes: users cannot write AdminComment |
| `Usage` (usage.py) | AdminComment | the node agents | yes (root) |
| `Record` (record.py) | Comment | cli_filter helper, the daemon | no: the job's owner can edit it at any time |
| `Placed` (placed.py) | inside the tag and the record | the daemon | as the field it is in |
| opt-in rule (optin.py) | Comment, batch script | the user | the user's own choice |
| staging (staging.py): datasets, `staged=`, `liquid-stage/1` hint | Comment / AdminComment | user / daemon | claim / yes |

Limits (limits.py) bound every field and every user text the root loops read. The Lua plugins carry
copies of the constants they need in a generated block that a unit test compares with `lua_block()`.
Nothing outside this package formats or parses these strings.
"""

from slurm_liquid.ledger.limits import COMMENT_LIMIT, VERSION, LedgerError, clean
from slurm_liquid.ledger.optin import comment_opts_in, comment_spec, opted_in, script_opts_in
from slurm_liquid.ledger.placed import Placed, format_placed, parse_placed
from slurm_liquid.ledger.record import FIELDS, Record
from slurm_liquid.ledger.tag import Tag, TagState, TrustedSpec, with_tag
from slurm_liquid.ledger.usage import USAGE_SOURCES, USAGE_VERSION, Usage, with_usage

__all__ = ["COMMENT_LIMIT", "FIELDS", "VERSION", "LedgerError", "Placed", "Record", "Tag", "TagState",
           "TrustedSpec", "USAGE_SOURCES", "USAGE_VERSION", "Usage", "clean", "comment_opts_in", "comment_spec", "format_placed",
           "opted_in", "parse_placed", "script_opts_in", "with_tag", "with_usage"]
