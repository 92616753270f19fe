"""The verify function's wiring: continuous verification's context for this container's flow."""

from __future__ import annotations

from srm.app.base import AppBase
from srm.control.verify import VerifyContext

__all__ = ["VerifyWiring"]


class VerifyWiring(AppBase):
    def verify_context(self) -> VerifyContext:
        """The verify function's dependencies for this container's flow (its readers are built per run, when one is
        due: most ticks of the schedule verify nothing)."""
        flow, config, _, _ = self._bind()
        return VerifyContext(config, flow, self.state, self.kafka.resolver, self.metrics)
