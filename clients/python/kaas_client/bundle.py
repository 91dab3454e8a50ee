"""A catalog bundle's index, read as the service reads it: `index.json`, or else
`index.json.gz`, format `kaas.catalog.v1` (src/catalog/bundle.rs), with the service's size
limit. Below both the kernel (`Kernel.bundle_entries`) and the catalog (`Catalog`), which
read bundles through it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Union

from .errors import KaasError

FORMAT = "kaas.catalog.v1"
# The largest decompressed index accepted, as the service (MAX_INDEX_BYTES).
MAX_INDEX_BYTES = 256 << 20

PathLike = Union[str, Path]


def has_index(path: PathLike) -> bool:
    """Whether a folder holds a bundle index (`index.json` or `index.json.gz`)."""
    p = Path(path)
    return (p / "index.json").is_file() or (p / "index.json.gz").is_file()


def read_index(path: PathLike) -> dict:
    """A bundle's decoded index: `index.json`, or else `index.json.gz`, with the service's
    precedence and size limit. Raises KaasError naming the file on any fault."""
    p = Path(path)
    plain, gz = p / "index.json", p / "index.json.gz"
    try:
        if plain.exists() or not gz.exists():
            if not plain.exists():
                raise KaasError(f"{p}: not a catalog bundle (no index.json or index.json.gz)")
            if plain.stat().st_size > MAX_INDEX_BYTES:
                raise KaasError(f"{plain}: larger than {MAX_INDEX_BYTES} bytes")
            text, where = plain.read_bytes(), plain
        else:
            with gzip.open(gz, "rb") as f:
                text = f.read(MAX_INDEX_BYTES + 1)
            if len(text) > MAX_INDEX_BYTES:
                raise KaasError(f"{gz}: decompresses to more than {MAX_INDEX_BYTES} bytes")
            where = gz
        index = json.loads(text)
    except (OSError, EOFError, ValueError) as e:  # gzip.BadGzipFile is an OSError
        raise KaasError(f"{p}: unreadable bundle index: {e}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        got = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise KaasError(f"{where}: format is `{got}`; expected `{FORMAT}`")
    return index
