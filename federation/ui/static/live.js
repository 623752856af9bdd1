// Bars and heat are drawn from data attributes, not inline styles, so the Content-Security-Policy can forbid
// every style but this site's own (setting a style from a script of ours is allowed).
// Heat is the free share: green where all is free, through amber, to red where nothing is: full reads as full.
const paint = (root) => {
  for (const el of root.querySelectorAll("[data-width]")) el.style.width = `${Number(el.dataset.width)}%`;
  for (const el of root.querySelectorAll("[data-heat]")) {
    el.style.background = `hsl(${Math.round(120 * Number(el.dataset.heat))}, 65%, 80%)`;
  }
};

// Tables sort by a column's header, on the page's rows; the order holds when live rows replace them.
const sortRows = (table) => {
  const th = table.querySelector("th.sorted-asc, th.sorted-desc");
  if (!th) return;
  const index = [...th.parentNode.children].indexOf(th);
  const numeric = th.dataset.sort === "number";
  const sign = th.classList.contains("sorted-asc") ? 1 : -1;
  const body = table.querySelector("tbody");
  const rows = [...body.querySelectorAll("tr[data-job]")];
  const value = (tr) => tr.children[index]?.dataset.value ?? "";
  rows.sort((a, b) => sign * (numeric ? Number(value(a)) - Number(value(b)) : value(a).localeCompare(value(b))));
  for (const tr of rows) body.appendChild(tr);
};
const sortable = (table) => {
  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const asc = !th.classList.contains("sorted-asc");
      for (const other of table.querySelectorAll("th")) other.classList.remove("sorted-asc", "sorted-desc");
      th.classList.add(asc ? "sorted-asc" : "sorted-desc");
      sortRows(table);
    });
  }
};
window.addEventListener("DOMContentLoaded", () => {
  paint(document);
  for (const table of document.querySelectorAll("table.sortable")) sortable(table);
});

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
      paint(target);
      if (live.matches("table.sortable")) sortRows(live);
      document.body.dataset.updated = String(Date.now());
    }, 200);
  };
  source.addEventListener("job", refresh);
})();
