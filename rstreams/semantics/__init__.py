"""The semantics core: what a window, a session, a join and an aggregation mean.

One implementation, driven by both backends: the embedded engine's processors and the
Spark backend's per-queue replay are adapters that feed records, the watermark and the
end of input to these state machines and turn what they emit into their own batches.
The modules are plain Python over a small state interface (:class:`.timing.State`);
they import nothing of the runtime, only the DSL's node and window classes.

- :mod:`.aggregations`: count, sum, min, max, reduce, aggregate as objects.
- :mod:`.windows`: window assignment, closing, emit modes, sessions, lateness.
- :mod:`.joins`: windowed joins, inner/left/outer, expiry.
- :mod:`.temporal`: joins without window: versioned sides, as-of lookups on event time.
- :mod:`.nullkeys`: the null-key rule of joins and aggregations.
- :mod:`.timing`: stream time, the heap key and the state interface they share.
"""

from __future__ import annotations
