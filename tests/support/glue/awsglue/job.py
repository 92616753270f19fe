"""``Job``: ``init`` then ``commit`` mark a run (Glue keeps bookmarks between them; here they are only checked to
be called in that order, and the run recorded in ``GLUE_SEAM_RECORD`` when set)."""

from __future__ import annotations

import json
import os
from typing import Any


class Job:
    def __init__(self, glue_context: Any) -> None:
        self.glue_context = glue_context
        self.name: str | None = None

    def init(self, job_name: str, args: dict[str, str] | None = None) -> None:
        self.name = job_name
        self.args = dict(args or {})

    def commit(self) -> None:
        if self.name is None:
            raise RuntimeError("Job.commit() before Job.init()")
        record = os.environ.get("GLUE_SEAM_RECORD")
        if record:
            with open(record, "w") as f:
                json.dump({"job": self.name, "args": self.args, "committed": True}, f)
