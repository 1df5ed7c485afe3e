// The charts' one interaction: the day and amount of the point under the pointer (or focused with the
// keyboard) are written beside the chart's title. Every point also carries them as its SVG <title>, so the
// charts read the same without this script.
"use strict";

function showReadout(event) {
  const point = event.target.closest(".point");
  if (!point) {
    return;
  }
  const figure = point.closest("figure.chart");
  const readout = figure && figure.querySelector(".readout");
  if (readout) {
    readout.textContent = point.dataset.label;
  }
  figure.querySelectorAll(".point.selected").forEach((other) => other.classList.remove("selected"));
  point.classList.add("selected");
}

document.addEventListener("mouseover", showReadout);
document.addEventListener("focusin", showReadout);
