"""kopf's record of the last handled spec, as a digest instead of a copy.

kopf keeps the whole last-handled spec in an annotation by default. Annotations are limited to
256 KiB in total, so a spec with a large inline config (allowed up to the object size) made
kopf's own patch fail and the CR never got a status. The operator never reads the old spec
(every reconcile works from the live object), so a sha256 of it is all kopf needs to tell
"changed" from "already handled". An annotation from an older operator (a JSON copy) is still
read, and replaced by a digest on the next change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import kopf

_PREFIX = "sha256:"


def _digest(essence: Any) -> str:
    return _PREFIX + hashlib.sha256(json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def fetch(self, *, body: kopf.Body) -> Any:
        for key in self.make_keys(self.key, body=body):
            stored = body.metadata.annotations.get(key)
            if stored is None:
                continue
            if stored.startswith(_PREFIX):
                essence = self.build(body=body)
                # Unchanged: the essence itself (no diff); changed: an empty base (a diff).
                return essence if _digest(essence) == stored.strip() else {}
            return json.loads(stored)
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        for key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[key] = _digest(essence)
        self._store_marker(prefix=self.prefix, patch=patch, body=body)
