// SPDX-License-Identifier: Apache-2.0
// sluice.js: NGINX asks Sluice before each proxied call and reports the
// outcome after it. Loaded by nginx.conf beside it (js_import); the set-up is
// in docs/nginx.md. Written for njs 0.7.9 (Debian 12's libnginx-mod-http-js).
//
// A guarded location sets three variables and hands over to sluice.guard:
//   $sluice_dependency  the policy name, e.g. "catalog"
//   $sluice_key         the partition key (a tenant, a client address) or ""
//   $sluice_upstream    the named location that proxies the call, e.g. @app
// guard() POSTs an AcquireRequest to Sluice through /_sluice/acquire, then
//   ALLOW    redirects to $sluice_upstream, which proxies as usual (streamed,
//            nothing buffered here); that location's header filter,
//            sluice.report, sends the ReportResultRequest when the
//            response's headers are known;
//   REJECT   answers 429 or 503 with Retry-After and a small JSON body;
//   DEGRADE  answers 200 with the policy's fallback;
// and fails open (redirects without a permit, reports nothing) when Sluice
// cannot decide: connection refused, timeout, an error status, or an answer
// without a verdict.

import crypto from 'crypto';

const ACQUIRE = '/_sluice/acquire';
const REPORT = '/_sluice/report';
// AcquireRequest.key is at most 1024 bytes; a longer key is sent hashed, so
// that a long X-Tenant header cannot turn Sluice's answer into an error (and
// the error into a fail-open).
const MAX_KEY_BYTES = 1024;

// "0.500s" (a Duration in proto3 JSON) in seconds; 0 when absent or bad.
function durationSeconds(text) {
    if (typeof text !== 'string' || text.slice(-1) !== 's') {
        return 0;
    }
    const seconds = parseFloat(text.slice(0, -1));
    return isFinite(seconds) && seconds > 0 ? seconds : 0;
}

// Retry-After in whole seconds: rounded up, at least 1.
function retryAfterSeconds(retryAfter) {
    return Math.max(1, Math.ceil(durationSeconds(retryAfter)));
}

// The Outcome of a proxied call by the status the client gets. 504 is also
// NGINX's own answer when the backend times out, 502 when it cannot be
// reached or answers garbage.
function outcomeOf(status) {
    if (status === 504) {
        return 'TIMEOUT';
    }
    return status >= 500 ? 'FAILURE' : 'SUCCESS';
}

// The key as Sluice takes it: itself, or its hash when too long.
function sluiceKey(key) {
    if (Buffer.byteLength(key) <= MAX_KEY_BYTES) {
        return key;
    }
    return 'sha256:' + crypto.createHash('sha256').update(key).digest('hex');
}

// The AcquireResponse, or null when Sluice could not decide.
async function acquire(r, dependency, key) {
    const body = JSON.stringify({
        dependency: dependency, key: key, caller: 'nginx',
    });
    const reply = await r.subrequest(ACQUIRE, { method: 'POST', body: body });
    if (reply.status !== 200) {
        // 502/504: Sluice refused the connection or timed out (the error log
        // has NGINX's line on it); 4xx: this request or the config is wrong.
        const message = `sluice: acquire "${dependency}" answered ` +
                        `${reply.status}; failing open`;
        if (reply.status >= 500) {
            r.warn(message);
        } else {
            r.error(message);
        }
        return null;
    }
    let decision = null;
    try {
        decision = JSON.parse(reply.responseText);
    } catch (e) {
        decision = null;
    }
    if (decision === null || typeof decision.verdict !== 'string') {
        r.error(`sluice: acquire "${dependency}" answered no verdict; ` +
                'failing open');
        return null;
    }
    return decision;
}

function answerJson(r, status, object) {
    r.headersOut['Content-Type'] = 'application/json';
    r.return(status, JSON.stringify(object) + '\n');
}

function reject(r, decision) {
    const reason = decision.reason || 'REASON_UNSPECIFIED';
    let status = decision.httpStatus;
    if (status !== 429 && status !== 503) {
        status = reason === 'RATE_LIMITED' ||
                 reason === 'CONCURRENCY_LIMITED' ? 429 : 503;
    }
    const seconds = retryAfterSeconds(decision.retryAfter);
    r.headersOut['Retry-After'] = String(seconds);
    r.headersOut['X-Sluice-Result'] = 'rejected';
    r.headersOut['X-Sluice-Reason'] = reason;
    answerJson(r, status, {
        error: 'refused', reason: reason, retry_after_seconds: seconds,
    });
}

// STATIC and CACHE serve the policy's payload (NGINX keeps no cache of good
// answers here, so CACHE always serves the payload); DEFAULT, and anything
// else, the built-in default answer.
function degrade(r, decision) {
    const reason = decision.reason || 'REASON_UNSPECIFIED';
    const fallback = decision.fallback || {};
    r.headersOut['X-Sluice-Result'] = 'degraded';
    r.headersOut['X-Sluice-Degraded'] = reason;
    if (fallback.strategy === 'STATIC' || fallback.strategy === 'CACHE') {
        r.headersOut['Content-Type'] =
            fallback.contentType || 'application/octet-stream';
        r.return(200, fallback.payload || '');
        return;
    }
    answerJson(r, 200, { degraded: true, reason: reason });
}

// js_content of a guarded location.
async function guard(r) {
    const dependency = r.variables.sluice_dependency;
    const upstream = r.variables.sluice_upstream;
    if (!dependency || !upstream) {
        r.error('sluice: the location of ' + r.uri + ' must set ' +
                '$sluice_dependency and $sluice_upstream');
        r.return(500);
        return;
    }
    let decision = null;
    try {
        decision = await acquire(r, dependency,
                                 sluiceKey(r.variables.sluice_key || ''));
    } catch (e) {
        r.error(`sluice: acquire "${dependency}" failed: ${e}; failing open`);
    }
    const verdict = decision === null ? 'FAIL_OPEN' : decision.verdict;
    if (verdict === 'REJECT') {
        reject(r, decision);
        return;
    }
    if (verdict === 'DEGRADE') {
        degrade(r, decision);
        return;
    }
    if (verdict === 'ALLOW') {
        r.variables.sluice_permit = decision.permitId || '';
        r.variables.sluice_start = String(Date.now());
        r.variables.sluice_result = 'backend';
    } else {
        // Sluice could not decide, or answered a verdict this script does
        // not know: make the call anyway.
        if (verdict !== 'FAIL_OPEN') {
            r.error(`sluice: acquire "${dependency}" answered verdict ` +
                    `${verdict}; failing open`);
        }
        r.variables.sluice_result = 'fail-open';
    }
    r.internalRedirect(upstream);
}

// js_header_filter of the upstream location: once the response's status is
// known, tells Sluice how the call went. The report is a detached
// subrequest, so the response goes on to the client meanwhile; the client
// never waits for Sluice here.
function report(r) {
    if (r.variables.sluice_result) {
        r.headersOut['X-Sluice-Result'] = r.variables.sluice_result;
    }
    const permit = r.variables.sluice_permit;
    if (!permit) {
        return;
    }
    r.variables.sluice_permit = '';  // once, even if the filter runs again
    const dependency = r.variables.sluice_dependency;
    const latencyMs = Math.max(0, Date.now() - Number(r.variables.sluice_start));
    const body = JSON.stringify({
        dependency: dependency,
        key: sluiceKey(r.variables.sluice_key || ''),
        permitId: permit,
        outcome: outcomeOf(r.status),
        latency: (latencyMs / 1000).toFixed(3) + 's',
        statusCode: r.status,
    });
    try {
        r.subrequest(REPORT, { method: 'POST', body: body, detached: true });
    } catch (e) {
        r.error(`sluice: report "${dependency}" not sent: ${e}`);
    }
}

export default { guard, report };
