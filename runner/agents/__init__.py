"""Ready for the agents people use: role prompts (what each pipeline role may do and what
runner parses from it) and presets of runner.toml commands for coding-agent CLIs."""

from runner.agents.presets import PRESET_NAMES, apply_preset, preset_tables
from runner.agents.prompts import ROLE_NAMES, render, role_prompt
from runner.core.tokens import ROLE_TOKENS as KNOWN_TOKENS

__all__ = ["KNOWN_TOKENS", "PRESET_NAMES", "ROLE_NAMES", "apply_preset", "preset_tables", "render", "role_prompt"]
