"""``getResolvedOptions`` as Glue's: ``--name value`` (or ``--name=value``) pairs; every requested option is
required; ``JOB_NAME`` and Glue's own arguments may be passed and are ignored unless requested."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


class GlueArgumentError(Exception):
    pass


def getResolvedOptions(args: Sequence[str], options: Sequence[str]) -> dict[str, str]:
    parser = argparse.ArgumentParser(add_help=False)
    for option in options:
        parser.add_argument(f"--{option}", required=True)
    try:
        parsed, _ = parser.parse_known_args(list(args[1:]))
    except SystemExit as e:
        raise GlueArgumentError(f"missing job arguments: one of {list(options)}") from e
    return {option: getattr(parsed, option) for option in options}
