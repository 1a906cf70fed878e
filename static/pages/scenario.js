// /scenarios/{id}/{seed} and /traces/{id}: the viewer with its measurements panel.
import { setupViewerPage } from "./viewer-page.js";

setupViewerPage(document.getElementById("viewer"));
