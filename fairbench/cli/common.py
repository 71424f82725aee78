"""What the command modules share: the two consoles and parsing of KEY=VALUE options."""

from __future__ import annotations

from rich.console import Console

from fairbench.errors import ConfigError

console = Console()
err_console = Console(stderr=True)


def key_values(items: list[str] | None, flag: str, example: str) -> dict[str, object]:
    """Repeated `FLAG KEY=VALUE` options as a dict, values parsed as YAML scalars."""
    import yaml

    parsed = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} {item!r}: write KEY=VALUE, e.g. {flag} {example}")
        parsed[key] = yaml.safe_load(value)
    return parsed
