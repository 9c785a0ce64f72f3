// The review desk's one script. The HTTP API wants the Cognito ID token in an Authorization header,
// which a browser never sends by itself: so the token lives in this tab's sessionStorage, every page
// is fetched with it and put in place of the current one, and the page's path is kept after "#" so
// that reloads, back/forward and links from e-mail work. Nothing is rendered here: the pages come
// from the server, escaped; forms are sent as they are, with the session's CSRF token.
"use strict";
(() => {
  const KEY = "dropscan.desk.token";
  let shown = null; // the path of the page on screen
  let wanted = null; // the path of the page being fetched

  function token() {
    const raw = sessionStorage.getItem(KEY);
    if (!raw) return null;
    try {
      const t = JSON.parse(raw);
      if (Date.now() / 1000 < t.exp - 30) return t.id;
    } catch (e) { /* a damaged entry: sign in again */ }
    sessionStorage.removeItem(KEY);
    return null;
  }

  function target() {
    const h = location.hash.slice(1);
    return h.startsWith("/") && !h.startsWith("//") ? h : "/desk";
  }

  async function load(path, init, how) {
    const t = token();
    if (!t) { showSignIn(); return; }
    wanted = path;
    const opts = Object.assign({}, init || {});
    opts.headers = Object.assign({ Authorization: "Bearer " + t }, opts.headers || {});
    const resp = await fetch(path, opts);
    if (resp.status === 401) { sessionStorage.removeItem(KEY); showSignIn(); return; }
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    document.title = doc.title;
    document.body.replaceWith(doc.body);
    const u = new URL(resp.url);
    shown = u.pathname + u.search;
    const where = "/#" + shown;
    if (how === "push") history.pushState(null, "", where);
    else if (how === "replace") history.replaceState(null, "", where);
    if (how !== "none") window.scrollTo(0, 0);
  }

  function showSignIn() {
    if (document.body.dataset.page !== "signin") { location.assign("/" + location.hash); return; }
    const form = document.getElementById("signin");
    if (form) form.hidden = false;
  }

  async function signIn(form) {
    const err = document.getElementById("signin-error");
    err.hidden = true;
    const resp = await fetch("/auth/signin", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(new FormData(form)),
    });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok || !body.id_token) {
      err.textContent = body.message || "sign-in failed";
      err.hidden = false;
      return;
    }
    sessionStorage.setItem(KEY, JSON.stringify({ id: body.id_token, exp: Date.now() / 1000 + body.expires_in }));
    load(target(), {}, "replace");
  }

  document.addEventListener("click", (ev) => {
    const a = ev.target.closest("a");
    if (!a || a.target || a.hasAttribute("download") || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    if (a.hasAttribute("data-signout")) {
      ev.preventDefault();
      sessionStorage.removeItem(KEY);
      location.assign("/");
      return;
    }
    const raw = a.getAttribute("href") || "";
    if (raw.startsWith("#") && !raw.startsWith("#/")) { // a place on this page (a cited commit)
      ev.preventDefault();
      const el = document.getElementById(decodeURIComponent(raw.slice(1)));
      if (el) el.scrollIntoView();
      return;
    }
    const u = new URL(a.href, location.href);
    if (u.origin !== location.origin || u.pathname === "/") return;
    ev.preventDefault();
    load(u.pathname + u.search, {}, "push");
  });

  document.addEventListener("submit", (ev) => {
    const form = ev.target;
    ev.preventDefault();
    if (form.id === "signin") { signIn(form); return; }
    const data = new URLSearchParams(new FormData(form, ev.submitter));
    const action = new URL(form.action, location.href);
    if (form.method.toLowerCase() === "get") {
      load(action.pathname + "?" + data.toString(), {}, "push");
      return;
    }
    load(action.pathname, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": document.body.dataset.csrf || "" },
      body: data,
    }, "push");
  });

  document.addEventListener("change", (ev) => {
    if (ev.target.matches("[data-select-all]")) {
      document.querySelectorAll("input[name=path]").forEach((c) => { c.checked = ev.target.checked; });
    }
  });

  // back, forward, or a new "#/..." typed or opened: show that page, once
  // (a change of "#" fires both popstate and hashchange: the page is fetched once)
  const follow = () => {
    const t = target();
    if (location.pathname === "/" && location.hash.startsWith("#/") && t !== shown && t !== wanted) {
      load(t, {}, "none");
    }
  };
  window.addEventListener("popstate", follow);
  window.addEventListener("hashchange", follow);

  if (document.body.dataset.page === "signin") {
    if (token()) load(target(), {}, "replace");
    else showSignIn();
  }
})();
