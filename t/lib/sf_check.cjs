// sf_check.cjs -- parses HTTP Structured Field Lists with the npm package
// structured-headers, a parser written elsewhere, so that the tests do not
// only trust their own (t/lib/sf_parse.py).
//
// Usage: node t/lib/sf_check.cjs NODE_MODULES_DIR NAME=VALUE ...
// Prints one JSON object: for each NAME, the List as an array of
// [item, params], an item being ["s", string], ["t", token], ["n", number]
// or ["b", boolean] and params an object of the same; or {"error": text}
// when VALUE does not parse.
'use strict';
const { createRequire } = require('module');

const load = createRequire(process.argv[2].replace(/\/?$/, '/'));
const sh = load('structured-headers');

function bare(v) {
    if (typeof v === 'string')
        return ['s', v];
    if (typeof v === 'number')
        return ['n', v];
    if (typeof v === 'boolean')
        return ['b', v];
    if (v instanceof sh.Token)
        return ['t', v.toString()];
    return ['?', String(v)];
}

const out = {};
for (const arg of process.argv.slice(3)) {
    const eq = arg.indexOf('=');
    const name = arg.slice(0, eq);
    try {
        out[name] = sh.parseList(arg.slice(eq + 1)).map(([item, params]) => {
            const p = {};
            for (const [k, v] of params)
                p[k] = bare(v);
            return [Array.isArray(item) ? ['inner', item.length] : bare(item), p];
        });
    } catch (e) {
        out[name] = { error: e.message };
    }
}
console.log(JSON.stringify(out));
