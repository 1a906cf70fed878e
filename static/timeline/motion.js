// How fast a held W/S zooms: slow when the key goes down, faster the longer it is held, and
// capped, so a person can stop where they mean to. The old fixed rate (1.0045 per ms, ~90x
// a second) took a 180 ms view to 21 µs in two seconds. Perfetto ramps up the same way.

export const ZOOM_START_PER_S = 2.5;  // zoom factor per second the moment the key goes down
export const ZOOM_MAX_PER_S = 8;      // the cap, reached after RAMP_MS held
export const RAMP_MS = 1500;

// The factor (>= 1) to zoom by over one frame of `dtMs`, the key having been held `heldMs`.
export function heldZoomFactor(heldMs, dtMs) {
  const f = Math.min(1, Math.max(0, heldMs) / RAMP_MS);
  const perS = ZOOM_START_PER_S + (ZOOM_MAX_PER_S - ZOOM_START_PER_S) * f;
  return Math.pow(perS, dtMs / 1000);
}
