/* global document, fetch, setTimeout, FormData */
/*
 * The rate limit console's page script: plain JavaScript, no framework, no
 * build step. It reads `api/session` once (the change token, the actor, the
 * refresh period), then `api/state` every refresh, and rebuilds the tables.
 * Every value from the fleet (identities, actors, reasons, routes, policy
 * names) reaches the DOM only as text (textContent, text nodes) or through
 * setAttribute with numbers: never as HTML.
 */
'use strict'

const SVG = 'http://www.w3.org/2000/svg'
const page = { token: '', refreshMs: 1000, timer: undefined, reading: false, again: false }

/** Control characters and bidirectional marks, shown as `\u{…}` so that a hostile value cannot hide or reorder text. */
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g // eslint-disable-line no-control-regex

function visible (value) {
  return String(value ?? '').replace(INVISIBLE, (ch) => `\\u{${ch.codePointAt(0).toString(16).padStart(4, '0')}}`)
}

/** An element with text children (strings become text nodes, never markup). */
function el (tag, className, ...children) {
  const node = document.createElement(tag)
  if (className) node.className = className
  for (const child of children) node.append(typeof child === 'string' || typeof child === 'number' ? String(child) : child)
  return node
}

/** A value from the fleet: isolated, wrapped, scrolled when long (`prose`: free text, in the page's font). */
function value (text, prose) {
  const node = el('span', prose ? 'value prose' : 'value')
  node.textContent = visible(text)
  return node
}

function cell (content, className) {
  const td = el('td', className)
  if (content !== undefined && content !== null) td.append(typeof content === 'object' ? content : String(content))
  return td
}

function fill (tbody, rows, columns, emptyText) {
  tbody.replaceChildren(...(rows.length > 0 ? rows : [el('tr', '', Object.assign(cell(emptyText, 'empty'), { colSpan: columns }))]))
}

function duration (ms) {
  if (ms === null || ms === undefined) return 'never'
  if (ms < 0) return 'lapsed'
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m} min ${s % 60} s`
  const h = Math.floor(m / 60)
  if (h < 48) return `${h} h ${m % 60} min`
  return `${Math.floor(h / 24)} d ${h % 24} h`
}

const rate = (n) => (Number(n) || 0).toFixed(Number(n) >= 10 ? 0 : 2)
const when = (ms) => new Date(Number(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z')

function notice (text, isError) {
  const node = document.getElementById('notice')
  node.textContent = visible(text)
  node.className = isError ? 'notice error' : 'notice'
  node.hidden = false
}

/** One call of the console's JSON API; a refusal or failure rejects with its status, code and message. */
async function call (method, path, body) {
  const init = { method, credentials: 'same-origin', cache: 'no-store', headers: { accept: 'application/json' } }
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json'
    init.headers['x-console-token'] = page.token
    init.body = JSON.stringify(body)
  }
  const res = await fetch(path, init)
  let data = null
  try { data = await res.json() } catch {}
  if (!res.ok) {
    const code = data && typeof data.code === 'string' ? data.code : ''
    const message = data && typeof data.message === 'string' ? data.message : (data && data.title) || res.statusText
    throw new Error(`${res.status}${code ? ' ' + code : ''}: ${message}`)
  }
  return data
}

/** A sparkline of the fleet's series (oldest first): three polylines of numbers. */
function sparkline (series) {
  const svg = document.createElementNS(SVG, 'svg')
  svg.setAttribute('class', 'spark')
  svg.setAttribute('viewBox', '0 0 100 30')
  svg.setAttribute('preserveAspectRatio', 'none')
  svg.setAttribute('role', 'img')
  const lines = ['admitted', 'refused', 'degraded'].map((name) => (Array.isArray(series?.[name]) ? series[name] : []).map((n) => Number(n) || 0))
  const top = Math.max(1, ...lines.flat())
  const length = Math.max(2, ...lines.map((line) => line.length))
  const title = document.createElementNS(SVG, 'title')
  title.textContent = ['admitted', 'refused', 'degraded'].map((name, i) => `${name}: ${lines[i].join(', ')}`).join('; ')
  svg.append(title)
  lines.forEach((line, i) => {
    const polyline = document.createElementNS(SVG, 'polyline')
    polyline.setAttribute('class', ['admitted', 'refused', 'degraded'][i])
    polyline.setAttribute('points', line.map((n, x) => `${(x * 100 / (length - 1)).toFixed(1)},${(28 - n * 26 / top + 1).toFixed(1)}`).join(' '))
    svg.append(polyline)
  })
  return svg
}

function button (label, className, onClick) {
  const node = el('button', className, label)
  node.type = 'button'
  node.addEventListener('click', onClick)
  return node
}

function callerText (identity) {
  if (identity === null || typeof identity !== 'object') return 'every caller'
  return Object.entries(identity).map(([kind, v]) => `${kind}: ${v}`).join(', ')
}

function renderFleet (fleet) {
  const instances = document.querySelector('#instances tbody')
  const nodes = document.querySelector('#nodes tbody')
  if (fleet === null) return
  const open = fleet.nodes.filter((node) => node.breaker !== 'closed').length
  const versions = new Set(fleet.instances.map((i) => i.version))
  document.getElementById('summary').textContent = `${fleet.instances.length} instance${fleet.instances.length === 1 ? '' : 's'} · ` +
    `${versions.size} version${versions.size === 1 ? '' : 's'} · ${open === 0 ? 'every breaker closed' : `${open} breaker${open === 1 ? '' : 's'} not closed`}` +
    (fleet.unreadable > 0 ? ` · ${fleet.unreadable} picture(s) in a format this version cannot read` : '')
  fill(instances, fleet.instances.map((i) => {
    const bad = i.store.nodes.filter((node) => node.breaker !== 'closed')
    return el('tr', '',
      cell(value(i.id)), cell(value(i.version)), cell(value(`${i.host} · ${i.pid}`)), cell(duration(i.uptimeMs)),
      cell(`${i.store.kind}${i.store.cluster ? ' (cluster)' : ''}`),
      cell(el('span', bad.length === 0 ? 'breaker-closed' : 'breaker-open', bad.length === 0 ? 'ok' : `${bad.length} of ${i.store.nodes.length} nodes failing`)),
      cell(`${i.bans} · ${i.overrides}`, 'number'), cell(`${duration(fleet.at - i.publishedAt)} ago`))
  }), 8, 'no instance has published a picture yet')
  fill(nodes, fleet.nodes.map((n) => el('tr', '',
    cell(value(n.instance)), cell(value(n.node)), cell(el('span', `breaker-${n.breaker === 'open' || n.breaker === 'probing' ? n.breaker : 'closed'}`, visible(n.breaker))),
    cell(n.failures, 'number'), cell(n.breaker === 'closed' ? '' : duration(n.retryInMs)))), 5, 'no node')
  // The busiest first: refusals, then admissions.
  const routes = [...fleet.routes].sort((a, b) => (b.perSecond.refused - a.perSecond.refused) || (b.perSecond.admitted - a.perSecond.admitted))
  fill(document.querySelector('#route-table tbody'), routes.map((r) => el('tr', '',
    cell(value(r.route)), cell(value(r.policy)), cell(r.instances, 'number'),
    cell(rate(r.perSecond.admitted), 'number'), cell(rate(r.perSecond.refused), 'number'), cell(rate(r.perSecond.degraded), 'number'),
    cell(`${r.admitted} · ${r.refused} · ${r.degraded}`, 'number'), cell(sparkline(r.series)))), 8, 'no decisions yet')
  const rows = []
  for (const group of fleet.top) {
    for (const caller of group.callers) {
      const ban = button('Ban…', 'danger', () => prefillBan(caller.hash, group.route))
      ban.dataset.hash = caller.hash
      rows.push(el('tr', 'caller', cell(value(group.route)), cell(value(caller.hash)), cell(caller.identity === undefined ? '' : value(caller.identity)),
        cell(caller.error > 0 ? `${Math.round(caller.count)} (±${Math.round(caller.error)})` : Math.round(caller.count), 'number'), cell(ban)))
    }
  }
  fill(document.querySelector('#top-table tbody'), rows, 5, 'no caller refused lately')
  const list = document.getElementById('disagreement-list')
  const variant = (v) => el('div', 'variant', `${v.instances.length} instance(s): `, value(v.instances.join(', ')),
    value(v.limits.map((b) => `${b.name}: ${b.limit} per ${b.windowMs} ms (${b.algorithm})`).join('; ') || 'no limit'))
  const missing = (d) => {
    const declared = d.variants.reduce((sum, v) => sum + v.instances.length, 0)
    return declared < fleet.instances.length ? [el('div', 'variant missing', `not declared on ${fleet.instances.length - declared} instance(s)`)] : []
  }
  const items = fleet.disagreements.map((d) => el('li', '', value(d.route), ...d.variants.map(variant), ...missing(d)))
  list.replaceChildren(...(items.length > 0 ? items : [el('li', 'empty', 'every instance declares the same limits')]))
}

function renderBans (bans, now) {
  if (bans === null) return
  fill(document.querySelector('#ban-table tbody'), bans.map((b) => el('tr', '',
    cell(value(b.route)), cell(value(callerText(b.identity))), cell(b.statusCode, 'number'),
    cell(b.expiresAt === null ? 'permanent' : `in ${duration(b.expiresAt - now)}`), cell(value(b.actor, true)), cell(value(b.reason, true)),
    cell(button('Lift', '', () => lift('bans/lift', 'lift-reason', b.id))))), 7, 'no ban in force')
}

function renderOverrides (overrides, now) {
  if (overrides === null) return
  fill(document.querySelector('#override-table tbody'), overrides.map((o) => el('tr', '',
    cell(value(o.block)), cell(value(o.route)), cell(value(callerText(o.identity))), cell(o.limit, 'number'),
    cell(o.expiresAt === null ? 'permanent' : `in ${duration(o.expiresAt - now)}`), cell(value(o.actor, true)), cell(value(o.reason, true)),
    cell(button('Clear', '', () => lift('overrides/clear', 'clear-reason', o.id))))), 8, 'no override in force')
}

function renderAudit (audit) {
  if (audit === null) return
  fill(document.querySelector('#audit-table tbody'), audit.map((a) => el('tr', '',
    cell(value(a.at)), cell(value(`${a.change} ${a.noun}`)), cell(value(a.id)), cell(value(a.actor, true)), cell(value(a.reason, true)))), 5, 'no change yet')
}

/** One read loop: a change asks for a read now; a read already under way is followed by one more, never by a second loop. */
async function refresh () {
  if (page.reading) {
    page.again = true
    return
  }
  page.reading = true
  clearTimeout(page.timer)
  const status = document.getElementById('status')
  try {
    const state = await call('GET', 'api/state')
    const now = state.fleet === null ? Date.now() : state.fleet.at
    renderFleet(state.fleet)
    renderBans(state.bans, now)
    renderOverrides(state.overrides, now)
    renderAudit(state.audit)
    status.textContent = state.problems.length === 0 ? `live · read ${when(now)}` : visible(`partly live: ${state.problems.join('; ')}`)
    status.className = state.problems.length === 0 ? 'status' : 'status error'
  } catch (error) {
    status.textContent = visible(`not updated: ${error.message}`)
    status.className = 'status error'
  }
  page.reading = false
  if (page.again) {
    page.again = false
    await refresh()
    return
  }
  page.timer = setTimeout(refresh, page.refreshMs)
}

function prefillBan (hash, route) {
  const form = document.getElementById('ban-form')
  form.elements.kind.value = 'keyHash'
  form.elements.value.value = hash
  form.elements.target.value = route
  form.elements.reason.focus()
}

async function lift (path, reasonId, id) {
  const reason = document.getElementById(reasonId).value.trim()
  if (reason === '') { notice('Type a reason first (it goes to the audit trail).', true); return }
  try {
    const result = await call('POST', `api/${path}`, { id, reason })
    notice(result.lifted === false || result.cleared === false ? `${visible(id)} was no longer in force` : `Done: ${id}`)
    document.getElementById(reasonId).value = ''
  } catch (error) {
    notice(error.message, true)
  }
  await refresh()
}

const ttlOf = (text) => text === 'permanent' ? 'permanent' : Number(text)

function changeForm (id, path, body, done) {
  const form = document.getElementById(id)
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    const fields = Object.fromEntries(new FormData(form))
    try {
      const result = await call('POST', `api/${path}`, body(fields))
      notice(done(result))
      form.elements.reason.value = ''
    } catch (error) {
      notice(error.message, true)
    }
    await refresh()
  })
}

const optional = (text) => text.trim() === '' ? undefined : text.trim()

async function start () {
  try {
    const session = await call('GET', 'api/session')
    page.token = session.token
    page.refreshMs = session.refreshMs
    document.getElementById('actor').textContent = visible(session.actor)
    document.getElementById('targets').replaceChildren(...session.targets.map((target) => Object.assign(document.createElement('option'), { value: target })))
  } catch (error) {
    notice(`The console could not start: ${error.message}`, true)
    return
  }
  changeForm('ban-form', 'bans', (f) => ({
    identity: { [f.kind]: f.value },
    target: optional(f.target),
    ttl: ttlOf(f.ttl),
    statusCode: Number(f.statusCode),
    reason: f.reason
  }), (ban) => `Banned: ${ban.id}`)
  changeForm('override-form', 'overrides', (f) => {
    // A value typed with "every caller" (or none with a caller kind) is a form the operator did not mean: say so, change nothing.
    if ((f.kind === '') !== (f.value.trim() === '')) throw new Error(f.kind === '' ? 'A value was typed but the caller is "every caller": choose the caller kind, or clear the value.' : 'Type the caller\'s value, or choose "every caller".')
    return {
      target: f.target.trim(),
      identity: f.kind === '' ? undefined : { [f.kind]: f.value },
      limit: Number(f.limit),
      ttl: ttlOf(f.ttl),
      reason: f.reason
    }
  }, (override) => `Override set for ${override.identity === undefined || override.identity === null ? 'every caller' : visible(callerText(override.identity))}: ${override.id}`)
  changeForm('reset-form', 'reset', (f) => ({ target: f.target.trim(), identity: { [f.kind]: f.value }, reason: f.reason }), () => 'Usage reset')
  await refresh()
}

start()
