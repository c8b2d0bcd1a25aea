/* flamegraph.js - the script of ncclprobe's SVG flame graphs (src/writers/flamegraph.c
   embeds it at build time, in the SVG's CDATA section: it must never hold "]]>").
   Frames are the <g> children of #np_frames, in preorder, with data-n (name),
   data-v (weight), data-o (offset), data-d (depth), data-p (parent's index, -1 for
   the root); it zooms, searches (regular expressions) and shows details, reading
   names only as data, never as code. window.ncclprobeFlame is for the tests. */
(function () {
  "use strict";
  var framesEl = document.getElementById("np_frames");
  if (!framesEl) return;
  var XPAD = Number(framesEl.getAttribute("data-xpad"));
  var WIDTH = Number(framesEl.getAttribute("data-width"));
  var CHAR_W = Number(framesEl.getAttribute("data-charw"));
  var total = Number(framesEl.getAttribute("data-total"));
  var details = document.getElementById("np_details");
  var unzoomEl = document.getElementById("np_unzoom");
  var searchEl = document.getElementById("np_search");
  var matchedEl = document.getElementById("np_matched");
  var info = [], open = [], searching = false, i;
  var kids = framesEl.children;
  for (i = 0; i < kids.length; i++) {
    var g = kids[i];
    g.npIndex = i;
    info.push({g: g, rect: g.querySelector("rect"), text: g.querySelector("text"),
      title: g.querySelector("title"), name: g.getAttribute("data-n") || "",
      v: Number(g.getAttribute("data-v")), o: Number(g.getAttribute("data-o")),
      d: Number(g.getAttribute("data-d")), p: Number(g.getAttribute("data-p")),
      end: i, fill: null});
  }
  for (i = 0; i < info.length; i++) { /* end: the last descendant */
    while (open.length && info[open[open.length - 1]].d >= info[i].d)
      info[open.pop()].end = i - 1;
    open.push(i);
  }
  while (open.length) info[open.pop()].end = info.length - 1;

  function fit(name, w) {
    var n = Math.floor((w - 6) / CHAR_W);
    if (n < 3) return "";
    var chars = Array.from(name);
    if (chars.length <= n) return name;
    return chars.slice(0, n - 2).join("") + "..";
  }
  function place(f, x, w) {
    f.rect.setAttribute("x", x.toFixed(2));
    f.rect.setAttribute("width", w.toFixed(2));
    f.text.setAttribute("x", (x + 3).toFixed(2));
    f.text.textContent = fit(f.name, w);
  }
  function show(f, how) {
    f.g.classList.toggle("hide", how === "hide");
    f.g.classList.toggle("parent", how === "parent");
  }
  function unzoom() {
    var scale = total > 0 ? WIDTH / total : 0;
    for (var i = 0; i < info.length; i++) {
      show(info[i], "");
      place(info[i], XPAD + info[i].o * scale, info[i].v * scale);
    }
    unzoomEl.classList.add("hide");
  }
  function zoom(idx) {
    var z = info[idx];
    if (!z || z.p < 0) { unzoom(); return; }
    var scale = WIDTH / z.v, above = {}, a;
    for (a = z.p; a >= 0; a = info[a].p) above[a] = true;
    for (var i = 0; i < info.length; i++) {
      var f = info[i];
      if (above[i]) {
        show(f, "parent");
        place(f, XPAD, WIDTH);
      } else if (i >= idx && i <= z.end && f.v * scale >= 0.1) {
        show(f, "");
        place(f, XPAD + (f.o - z.o) * scale, f.v * scale);
      } else {
        show(f, "hide");
      }
    }
    unzoomEl.classList.remove("hide");
  }
  function resetSearch() {
    for (var i = 0; i < info.length; i++) {
      if (info[i].fill !== null) info[i].rect.setAttribute("fill", info[i].fill);
      info[i].fill = null;
    }
    matchedEl.textContent = " ";
    searchEl.classList.remove("active");
    searching = false;
  }
  /* Highlights the frames whose name matches term (a regular expression);
     returns the share of the total they cover, in percent (nested
     matches counted once), or null for an invalid expression. */
  function search(term) {
    var re;
    try { re = new RegExp(term); } catch (e) {
      matchedEl.textContent = "Invalid regular expression";
      return null;
    }
    resetSearch();
    var sum = 0, covered = -1;
    for (var i = 0; i < info.length; i++) {
      var f = info[i];
      if (!re.test(f.name)) continue;
      f.fill = f.rect.getAttribute("fill");
      f.rect.setAttribute("fill", "rgb(230,0,230)");
      if (i > covered) { sum += f.v; covered = f.end; }
    }
    var pct = total > 0 ? 100 * sum / total : 0;
    matchedEl.textContent = "Matched: " + pct.toFixed(1) + "%";
    searchEl.classList.add("active");
    searching = true;
    return pct;
  }
  function askSearch() {
    if (searching) { resetSearch(); return; }
    var term = window.prompt("Search frames (regular expression)", "");
    if (term) search(term);
  }
  function frameOf(t) {
    while (t && t.parentNode !== framesEl) t = t.parentNode;
    return t;
  }
  framesEl.addEventListener("click", function (e) {
    var g = frameOf(e.target);
    if (g) zoom(g.npIndex);
  });
  framesEl.addEventListener("mouseover", function (e) {
    var g = frameOf(e.target);
    if (g) details.textContent = info[g.npIndex].title.textContent;
  });
  framesEl.addEventListener("mouseout", function () { details.textContent = " "; });
  unzoomEl.addEventListener("click", unzoom);
  searchEl.addEventListener("click", askSearch);
  window.addEventListener("keydown", function (e) {
    if (e.key === "F3" || ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F"))) {
      e.preventDefault();
      askSearch();
    } else if (e.key === "Escape") {
      resetSearch();
      unzoom();
    }
  });
  window.ncclprobeFlame = {search: search, resetSearch: resetSearch, zoom: zoom,
    unzoom: unzoom, frames: info.length};
})();
