"""What each agent CLI needs of $HOME and the environment inside the sandbox (runner.worker.sandbox):
its own config and login, from each CLI's documentation. `runner init --agent NAME` writes them
into runner.toml's [worker] sandbox_home and env_pass; the rest of $HOME stays out of sight."""

from __future__ import annotations

# preset -> the files and folders of $HOME it reads and writes (config, login, sessions, caches)
HOME_PATHS: dict[str, tuple[str, ...]] = {
    "claude": ("~/.claude", "~/.claude.json"),  # settings, credentials and projects; the CLI's state file
    "codex": ("~/.codex",),  # $CODEX_HOME: config.toml, auth.json, sessions
    "opencode": ("~/.config/opencode", "~/.local/share/opencode", "~/.local/state/opencode", "~/.cache/opencode"),
    "gemini": ("~/.gemini",),  # settings.json, oauth_creds.json
    "aider": ("~/.aider.conf.yml", "~/.env", "~/.aider", "~/.aider.model.settings.yml", "~/.aider.model.metadata.json"),
}
# preset -> the variables it reads (API keys, endpoints, its own settings) beyond the sandbox's base list
ENV_NAMES: dict[str, tuple[str, ...]] = {
    "claude": (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
    ),
    "codex": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"),
    "opencode": ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY", "OPENCODE_CONFIG"),
    "gemini": (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ),
    "aider": (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENROUTER_API_KEY",
        "GEMINI_API_KEY",
        "DEEPSEEK_API_KEY",
        "AIDER_MODEL",
    ),
}
