// Each queue's dominant share over the last hour, drawn by uPlot (vendored from npm, served from here).
// 1.0 is the deserved share: above it the queue holds more than it deserves.
window.addEventListener("DOMContentLoaded", () => {
  for (const el of document.querySelectorAll("div.history")) {
    const samples = JSON.parse(el.dataset.samples || "[]");
    const times = samples.map((s) => s[0]);
    const shares = samples.map((s) => (s[1] < 0 ? null : s[1]));
    new uPlot({
      width: 220, height: 70, legend: { show: false }, cursor: { show: false },
      scales: { y: { range: (u, min, max) => [0, Math.max(1.2, max || 0)] } },
      axes: [{ show: false }, { size: 30, ticks: { show: false } }],
      series: [{}, { stroke: "#0969da", width: 1.5, points: { show: samples.length < 3 } }],
    }, [times, shares], el);
  }
});
