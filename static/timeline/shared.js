// Small helpers shared by the painter and the viewer.
export { firstEndingAfter } from "./data.js";
import { formatDuration } from "./timescale.js";

export function formatDurationShort(ns) { return formatDuration(ns, 3); }
