"""kopf's record of the last handled spec, as a digest instead of a copy.

kopf keeps the whole last-handled spec in an annotation by default. Annotations are limited to
256 KiB in total, so a spec with a large inline config (allowed up to the object size) made
kopf's own patch fail and the CR never got a status. The operator never reads the old spec
(every reconcile works from the live object), so a sha256 of it is all kopf needs to tell
"changed" from "already handled". An annotation from an older operator (a JSON copy) is still
read, and replaced by a digest on the next change.

kopf records the spec of the event it handled; the reconcile judged the live object, which may
be newer. After rapid edits that return to an earlier spec (k 3 -> 5 -> 3), kopf's record of
the older event matched the newest spec, the last edit looked handled and was never reconciled.
So the reconcile tells the storage which spec it judged (`judged`), and that is what is recorded.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import kopf

_PREFIX = "sha256:"


def _digest(essence: Any) -> str:
    return _PREFIX + hashlib.sha256(json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._judged: dict[str, Any] = {}  # uid -> the spec the last reconcile judged

    def judged(self, live: Mapping[str, Any]) -> None:
        """The reconcile judged this object's spec: record it, not the event's, as handled."""
        uid = (live.get("metadata") or {}).get("uid")
        if uid:
            self._judged[uid] = copy.deepcopy(live.get("spec"))

    def forget(self, uid: str | None) -> None:
        """Before a reconcile (it may be cut off) and when the object is gone."""
        self._judged.pop(uid or "", None)

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
        uid = body.metadata.uid or ""
        if uid in self._judged and isinstance(essence, dict):
            essence = {**essence, "spec": self._judged.pop(uid)}
        for key in self.make_keys(self.key, body=body):
            patch.metadata.annotations[key] = _digest(essence)
        self._store_marker(prefix=self.prefix, patch=patch, body=body)
