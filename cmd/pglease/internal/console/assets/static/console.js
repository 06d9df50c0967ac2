// pglease console: keeps the server-rendered page up to date from the
// event stream. Plain JavaScript, no dependencies. Every value from the
// database is put into the page with textContent or as an attribute value,
// never parsed as HTML.
(function () {
  'use strict';

  var root = document.getElementById('console');
  if (!root || !window.EventSource) {
    return;
  }
  var csrf = root.getAttribute('data-csrf');
  var allowRelease = root.getAttribute('data-allow-release') === 'true';
  var table = root.getAttribute('data-table');
  var rowsEl = document.getElementById('rows');
  var feedEl = document.getElementById('feed');
  var statusEl = document.getElementById('status');
  var statusText = document.getElementById('status-text');
  var noticeEl = document.getElementById('notice');

  var offset = 0;        // server clock minus this browser's clock, ms
  var leases = [];       // of the latest snapshot
  var queuesKnown = true; // the console may read who waits
  var rows = new Map();  // lease name -> {tr, cells}
  var feedKeys = new Set();

  var columns = [
    ['owner', 'Owner', ''],
    ['token', 'Token', 'num'],
    ['held', 'Held for', 'num'],
    ['expires', 'Expires in', 'num'],
    ['heartbeat', 'Heartbeat age', 'num'],
    ['state', 'State', ''],
    ['queue', 'Waiting', ''],
    ['meta', 'Metadata', '']
  ];

  // human formats milliseconds as pglease ls does: 850ms, 12.3s, 4m05s, 2h03m, 3d04h.
  function human(ms) {
    var neg = ms < 0;
    if (neg) { ms = -ms; }
    var s;
    var two = function (n) { return (n < 10 ? '0' : '') + n; };
    if (ms < 1000) {
      s = Math.floor(ms) + 'ms';
    } else if (ms < 60000) {
      s = (Math.floor(ms / 100) / 10).toFixed(1) + 's';
    } else if (ms < 3600000) {
      s = Math.floor(ms / 60000) + 'm' + two(Math.floor(ms / 1000) % 60) + 's';
    } else if (ms < 48 * 3600000) {
      s = Math.floor(ms / 3600000) + 'h' + two(Math.floor(ms / 60000) % 60) + 'm';
    } else {
      s = Math.floor(ms / 86400000) + 'd' + two(Math.floor(ms / 3600000) % 24) + 'h';
    }
    return neg ? '-' + s : s;
  }

  // clock shows a time of day as HH:MM:SS, as the server's render does.
  function clock(d) {
    var two = function (n) { return (n < 10 ? '0' : '') + n; };
    return two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds());
  }

  function setText(el, s) {
    if (el && el.textContent !== s) {
      el.textContent = s;
    }
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function hidden(input, name, value) {
    input.type = 'hidden';
    input.name = name;
    input.value = value;
    return input;
  }

  function cellsOf(tr) {
    var cells = { name: tr.querySelector('.name') };
    columns.forEach(function (c) { cells[c[0]] = tr.querySelector('.' + c[0]); });
    cells.badge = tr.querySelector('.badge');
    cells.code = tr.querySelector('.meta code');
    return cells;
  }

  function makeRow(name) {
    var tr = el('tr');
    tr.setAttribute('data-name', name);
    var th = el('th', 'name', name);
    th.scope = 'row';
    th.setAttribute('data-label', 'Name');
    tr.appendChild(th);
    columns.forEach(function (c) {
      var td = el('td', c[0] + (c[2] ? ' ' + c[2] : ''));
      td.setAttribute('data-label', c[1]);
      if (c[0] === 'state') { td.appendChild(el('span', 'badge')); }
      if (c[0] === 'meta') { td.appendChild(el('code')); }
      tr.appendChild(td);
    });
    if (allowRelease) {
      var td = el('td', 'action');
      td.setAttribute('data-label', 'Action');
      var form = el('form', 'release-form');
      form.method = 'post';
      form.action = 'release';
      form.appendChild(hidden(el('input'), 'csrf', csrf));
      form.appendChild(hidden(el('input'), 'name', name));
      var button = el('button', 'release', 'Force release');
      button.type = 'submit';
      button.setAttribute('aria-label', 'Force-release ' + name);
      form.appendChild(button);
      td.appendChild(form);
      tr.appendChild(td);
    }
    return { tr: tr, cells: cellsOf(tr) };
  }

  // waiting describes a row's queue as pglease ls does: the owners, first
  // in line first, each with how long it has waited by the server's clock
  // and the kind of a wait other than an exclusive one's (kind_label).
  function waiting(list, now) {
    if (!queuesKnown) { return '?'; }
    if (!list || list.length === 0) { return '-'; }
    return list.map(function (w) {
      return (w.owner || '?') + ' ' + human(Math.max(0, now - w.since)) + (w.kind_label ? ' (' + w.kind_label + ')' : '');
    }).join(', ');
  }

  function setState(r, state) {
    if (r.state === state) { return; }
    r.state = state;
    r.tr.className = 'state-' + state;
    r.cells.badge.className = 'badge badge-' + state;
    setText(r.cells.badge, state);
  }

  // tick recomputes the durations by the server's clock, and shows a lease
  // as expired the moment it expires.
  function tick() {
    var now = Date.now() + offset;
    var held = 0, stale = 0, expired = 0;
    leases.forEach(function (l) {
      var r = rows.get(l.name);
      if (!r) { return; }
      var left = l.expires - now;
      var state = l.state;
      if (left <= 0) { state = 'expired'; }
      setState(r, state);
      if (state === 'held') { held++; } else if (state === 'stale') { stale++; } else { expired++; }
      setText(r.cells.held, human(now - l.acquired));
      setText(r.cells.expires, state === 'expired' ? 'expired ' + human(Math.max(0, -left)) + ' ago' : human(left));
      setText(r.cells.heartbeat, human(now - l.renewed));
      setText(r.cells.queue, waiting(l.waiters, now));
    });
    setText(document.getElementById('counts'), held + ' held, ' + stale + ' stale, ' + expired + ' expired');
  }

  function renderLeases(list) {
    var seen = new Set();
    var prev = null;
    list.forEach(function (l) {
      seen.add(l.name);
      var r = rows.get(l.name);
      if (!r) {
        r = makeRow(l.name);
        rows.set(l.name, r);
      }
      setText(r.cells.name, l.kind_label ? l.name + ' (' + l.kind_label + ')' : l.name);
      setText(r.cells.owner, l.owner);
      setText(r.cells.token, l.token);
      setText(r.cells.code, l.metadata);
      var want = prev ? prev.nextElementSibling : rowsEl.firstElementChild;
      if (r.tr !== want) {
        rowsEl.insertBefore(r.tr, want);
      }
      prev = r.tr;
    });
    rows.forEach(function (r, name) {
      if (!seen.has(name)) {
        r.tr.remove();
        rows.delete(name);
      }
    });
    leases = list;
    tick();
  }

  function renderFeed(feed) {
    var fresh = [];
    feed.forEach(function (e) {
      var key = e.at + '|' + e.kind + '|' + e.name + '|' + e.text;
      if (!feedKeys.has(key)) {
        feedKeys.add(key);
        fresh.push(e);
      }
    });
    fresh.forEach(function (e) {
      var li = el('li', 'feed-' + e.kind);
      var t = el('time', '', clock(new Date(e.at - offset)));
      t.dateTime = new Date(e.at).toISOString();
      li.appendChild(t);
      li.appendChild(document.createTextNode(' '));
      li.appendChild(el('span', 'text', e.text));
      feedEl.insertBefore(li, feedEl.firstElementChild);
    });
    while (feedEl.children.length > 50) {
      feedEl.lastElementChild.remove();
    }
    document.getElementById('feed-empty').hidden = feedEl.children.length > 0;
  }

  function setStatus(text, cls) {
    statusEl.className = 'status status-' + cls;
    setText(statusText, text);
  }

  function render(s) {
    offset = s.now - Date.now();
    setStatus(s.status.text, s.status.class);
    queuesKnown = s.status.queues !== false;
    var missing = document.getElementById('missing');
    setText(missing, 'no lease table ' + table + ' yet');
    missing.hidden = s.status.exists || s.status.class === 'down';
    document.getElementById('empty').hidden = !s.status.exists || s.leases.length > 0;
    renderLeases(s.leases);
    renderFeed(s.feed);
    root.setAttribute('data-version', String(s.version));
  }

  // Adopt the server-rendered rows and feed.
  Array.prototype.slice.call(rowsEl.childNodes).forEach(function (n) {
    if (n.nodeType !== 1) { n.remove(); }
  });
  Array.prototype.forEach.call(rowsEl.children, function (tr) {
    var r = { tr: tr, cells: cellsOf(tr) };
    rows.set(tr.getAttribute('data-name'), r);
  });
  Array.prototype.slice.call(feedEl.childNodes).forEach(function (n) {
    if (n.nodeType !== 1) { n.remove(); }
  });
  Array.prototype.forEach.call(feedEl.children, function (li) {
    feedKeys.add(li.getAttribute('data-key'));
  });

  var source = new EventSource('events');
  source.addEventListener('snapshot', function (ev) {
    render(JSON.parse(ev.data));
  });
  source.addEventListener('error', function () {
    setStatus('connection to the console lost, reconnecting…', 'lost');
  });
  setInterval(tick, 1000);

  function notice(text) {
    noticeEl.hidden = false;
    setText(noticeEl, text);
  }

  // Force-release: confirm, then POST with the form's token.
  rowsEl.addEventListener('submit', function (ev) {
    var form = ev.target;
    if (!form.classList || !form.classList.contains('release-form')) { return; }
    ev.preventDefault();
    var name = form.elements.name.value;
    if (!window.confirm('Force-release "' + name + '"?\n\nIts holder loses the lease at its next renewal.')) {
      return;
    }
    var button = form.querySelector('button');
    button.disabled = true;
    var body = new URLSearchParams();
    body.set('csrf', csrf);
    body.set('name', name);
    body.set('confirm', 'yes');
    fetch('release', {
      method: 'POST', body: body, credentials: 'same-origin',
      headers: { 'Accept': 'application/json' }
    }).then(function (resp) {
      return resp.json().then(function (j) {
        if (resp.ok) {
          notice('Released ' + j.released + ' (was ' + j.owner + ', token ' + j.token + ').');
        } else {
          notice('Not released: ' + (j.error || resp.status));
        }
      });
    }).catch(function (err) {
      notice('Not released: ' + err);
    }).finally(function () {
      button.disabled = false;
    });
  });
}());
