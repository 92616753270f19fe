"""Custom Single Message Transforms, named by dotted path in the tests' configurations (``tests.support.transforms.X``):
Python classes with the built-ins' small interface, none of them a subclass of srm's."""

from __future__ import annotations

from collections.abc import Mapping

from srm.core.transforms import Record

__all__ = ["Explodes", "KeyPrefix", "Rerouter", "Reverse", "TakesNoConfig", "ValueStartsWith"]


class Reverse:
    """Reverses the value's bytes (a tombstone stays one)."""

    def apply(self, record: Record) -> Record | None:
        return record if record.value is None else record._replace(value=record.value[::-1])


class KeyPrefix:
    """Prefixes the key with ``prefix``; refuses to be configured without it."""

    def configure(self, config: Mapping[str, str]) -> None:
        if not config.get("prefix"):
            raise ValueError("prefix is required")
        self.prefix = config["prefix"].encode()

    def apply(self, record: Record) -> Record | None:
        return record._replace(key=self.prefix + (record.key or b""))


class ValueStartsWith:
    """A predicate: the value starts with ``prefix``."""

    def configure(self, config: Mapping[str, str]) -> None:
        self.prefix = config.get("prefix", "").encode()

    def test(self, record: Record) -> bool:
        return record.value is not None and record.value.startswith(self.prefix)


class Explodes:
    """Raises on the record whose value is ``boom``."""

    def apply(self, record: Record) -> Record | None:
        if record.value == b"boom":
            raise RuntimeError("cannot handle\nboom")
        return record


class Rerouter:
    """Tries to send records to another topic (which a chain must refuse)."""

    def apply(self, record: Record) -> Record | None:
        return record._replace(topic="elsewhere")


class TakesNoConfig:
    """Has no apply method: not a transform."""
