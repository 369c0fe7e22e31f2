"""Test-wide settings: hypothesis profiles (CI runs more examples, derandomised)."""

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=200, derandomize=True, deadline=None)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
