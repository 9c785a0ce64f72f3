// The review desk's one script. The HTTP API wants the Cognito ID token in an Authorization header,
// which a browser never sends by itself: so the tokens live in this tab's sessionStorage, every page
// is fetched with it and put in place of the current one, and the page's path is kept after "#" so
// that reloads, back/forward and links from e-mail work. Nothing is rendered here: the pages come
// from the server, escaped; forms are sent as they are, with the session's CSRF token.
"use strict";
(() => {
  const KEY = "dropscan.desk.token";
  let shown = null; // the path of the page on screen
  let wanted = null; // the path of the page being fetched

  // the session: the ID token the API wants, the access token sign-out revokes with, and the refresh
  // token that renews the ID token (REFRESH_TOKEN_AUTH) a minute before it expires
  const MARGIN = 60;
  let renewing = null; // one renewal at a time
  let timer = null;

  function session() {
    const raw = sessionStorage.getItem(KEY);
    if (!raw) return null;
    try { return JSON.parse(raw); } catch (e) { sessionStorage.removeItem(KEY); return null; }
  }

  function keep(body, previous) {
    const s = {
      id: body.id_token,
      access: body.access_token || "",
      refresh: body.refresh_token || (previous && previous.refresh) || "",
      exp: Date.now() / 1000 + body.expires_in,
    };
    sessionStorage.setItem(KEY, JSON.stringify(s));
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => { renew(); }, Math.max(0, (body.expires_in - MARGIN) * 1000));
    return s;
  }

  async function renew() {
    const s = session();
    if (!s || !s.refresh) { sessionStorage.removeItem(KEY); return null; }
    if (!renewing) {
      renewing = (async () => {
        const resp = await fetch("/auth/refresh", {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ refresh_token: s.refresh }),
        });
        const body = await resp.json().catch(() => ({}));
        if (!resp.ok || !body.id_token) { sessionStorage.removeItem(KEY); return null; }
        return keep(body, s).id;
      })().finally(() => { renewing = null; });
    }
    return renewing;
  }

  async function token() {
    const s = session();
    if (!s) return null;
    if (s.id && Date.now() / 1000 < s.exp - MARGIN) return s.id;
    return renew();
  }

  async function signOut() {
    const s = session();
    sessionStorage.removeItem(KEY);
    if (s && s.access) {
      await fetch("/auth/signout", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ access_token: s.access }),
      }).catch(() => null);
    }
    location.assign("/");
  }

  function target() {
    const h = location.hash.slice(1);
    return h.startsWith("/") && !h.startsWith("//") ? h : "/desk";
  }

  async function load(path, init, how) {
    let t = await token();
    if (!t) { showSignIn(); return; }
    wanted = path;
    const opts = Object.assign({}, init || {});
    const send = (id) => fetch(path, Object.assign({}, opts, {
      headers: Object.assign({ Authorization: "Bearer " + id }, opts.headers || {}),
    }));
    let resp = await send(t);
    if (resp.status === 401) { // expired meanwhile (a suspended laptop): renew once, then sign in
      t = await renew();
      if (t) resp = await send(t);
      if (!t || resp.status === 401) { sessionStorage.removeItem(KEY); showSignIn(); return; }
    }
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

  function fail(id, message) {
    const err = document.getElementById(id);
    err.textContent = message;
    err.hidden = false;
  }

  async function signIn(form) {
    document.getElementById("signin-error").hidden = true;
    const resp = await fetch("/auth/signin", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(new FormData(form)),
    });
    const body = await resp.json().catch(() => ({}));
    if (resp.ok && body.state === "new-password-required") { askNewPassword(form, body); return; }
    if (!resp.ok || !body.id_token) { fail("signin-error", body.message || "sign-in failed"); return; }
    keep(body, null);
    load(target(), {}, "replace");
  }

  // a first sign-in with a temporary password: the challenge's session and its CSRF token go in the
  // new-password form (never into storage), which answers it with the user's own password
  function askNewPassword(signin, body) {
    const form = document.getElementById("new-password");
    document.getElementById("new-password-username").value = body.username;
    document.getElementById("new-password-session").value = body.session;
    document.getElementById("new-password-csrf").value = body.csrf;
    document.getElementById("new-password-error").hidden = true;
    signin.reset();
    signin.hidden = true;
    form.hidden = false;
    document.getElementById("new-password-1").focus();
  }

  async function setNewPassword(form) {
    document.getElementById("new-password-error").hidden = true;
    const data = new URLSearchParams(new FormData(form));
    if (data.get("new_password") !== data.get("confirm")) {
      fail("new-password-error", "the two passwords differ: type the same one twice");
      return;
    }
    const resp = await fetch("/auth/new-password", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": data.get("csrf") || "" },
      body: data,
    });
    const body = await resp.json().catch(() => ({}));
    if (resp.status === 401) { // the challenge's minutes are over: sign in again with the temporary password
      form.reset();
      form.hidden = true;
      document.getElementById("signin").hidden = false;
      fail("signin-error", body.message || "sign in again");
      return;
    }
    if (!resp.ok || !body.id_token) { fail("new-password-error", body.message || "not set"); return; }
    form.reset();
    keep(body, null);
    load(target(), {}, "replace");
  }

  document.addEventListener("click", (ev) => {
    const a = ev.target.closest("a");
    if (!a || a.target || a.hasAttribute("download") || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    if (a.hasAttribute("data-signout")) {
      ev.preventDefault();
      signOut();
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
    if (form.id === "new-password") { setNewPassword(form); return; }
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
    if (session()) load(target(), {}, "replace");
    else showSignIn();
  }
})();
