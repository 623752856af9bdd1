// Bars and heat are drawn from data attributes, not inline styles, so the Content-Security-Policy can forbid
// every style but this site's own (setting a style from a script of ours is allowed).
const paint = (root) => {
  for (const el of root.querySelectorAll("[data-width]")) el.style.width = `${Number(el.dataset.width)}%`;
  for (const el of root.querySelectorAll("[data-heat]")) {
    el.style.background = `rgba(46, 160, 67, ${Number(el.dataset.heat)})`;
  }
};
window.addEventListener("DOMContentLoaded", () => paint(document));

// Live pages: on each job event from /events, the part of the page marked data-live is fetched again
// and replaced, so a job is seen moving without a reload. No framework: one EventSource, one fetch.
(() => {
  const live = document.querySelector("[data-live]");
  if (!live || !window.EventSource) return;
  const job = live.dataset.job ? `?job=${encodeURIComponent(live.dataset.job)}` : "";
  const source = new EventSource(`/events${job}`);
  let pending = false;
  const refresh = async () => {
    if (pending) return;
    pending = true;
    setTimeout(async () => {
      pending = false;
      const url = live.dataset.live + (live.dataset.job ? "" : window.location.search);
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok) return;
      const html = await response.text();
      const target = live.tagName === "TABLE" ? live.querySelector("tbody") : live;
      if (live.dataset.job) {
        const doc = new DOMParser().parseFromString(html, "text/html");
        const fresh = doc.querySelector("#live");
        if (fresh) target.innerHTML = fresh.innerHTML;
      } else {
        target.innerHTML = html;
      }
      document.body.dataset.updated = String(Date.now());
    }, 200);
  };
  source.addEventListener("job", refresh);
})();
