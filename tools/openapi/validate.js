#!/usr/bin/env node
// Validates OpenAPI documents with @apidevtools/swagger-parser (the
// OpenAPI 3.0/3.1 JSON schema, then its own checks: $refs resolve, path
// parameters declared, ...), and two it does not make for OpenAPI 3.1:
// operationIds are unique, and each path's {name}s are its path
// parameters, no more, no less.  Prints "<file>: valid"
// or the errors, and exits 1 when a document is not valid.
// Usage: node tools/openapi/validate.js docs/openapi.yaml [...]

'use strict';

const SwaggerParser = require('@apidevtools/swagger-parser');

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch',
                 'trace'];

// api: dereferenced
function ourChecks(api) {
    const errors = [];
    const ids = {};

    for (const [path, item] of Object.entries(api.paths || {})) {
        const names = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);

        for (const m of METHODS.filter((m) => item[m])) {
            const op = item[m];
            const where = `${m.toUpperCase()} ${path}`;

            if (op.operationId) {
                if (ids[op.operationId]) {
                    errors.push(`${where}: operationId ${op.operationId} `
                        + `is also ${ids[op.operationId]}'s`);
                }
                ids[op.operationId] = where;
            }

            const declared = [...(item.parameters || []),
                              ...(op.parameters || [])]
                .filter((p) => p.in === 'path').map((p) => p.name);

            for (const n of names.filter((n) => !declared.includes(n))) {
                errors.push(`${where}: path parameter {${n}} not declared`);
            }
            for (const n of declared.filter((n) => !names.includes(n))) {
                errors.push(`${where}: path parameter ${n} not in the path`);
            }
        }
    }

    return errors;
}

async function main(files) {
    let failed = 0;

    for (const file of files) {
        try {
            const api = await SwaggerParser.validate(file);
            const errors = ourChecks(api);
            if (errors.length) {
                throw new Error(errors.join('\n  '));
            }
            console.log(`${file}: valid (OpenAPI ${api.openapi}, `
                + `${Object.keys(api.paths || {}).length} paths)`);
        } catch (err) {
            failed++;
            console.log(`${file}: not valid: ${err.message}`);
        }
    }

    return failed ? 1 : 0;
}

if (process.argv.length < 3) {
    console.error('usage: validate.js <openapi.yaml> ...');
    process.exit(2);
}

main(process.argv.slice(2)).then((rc) => process.exit(rc));
