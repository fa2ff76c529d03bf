#!/usr/bin/python3
"""Answers checked against docs/openapi.yaml (t/openapi.t).

    openapi_check.py <openapi.yaml> <answers.json>

answers.json: a list of answers, each {"method", "path" (without the query),
"status", "headers" (lowercase names), "body"}.  Prints a JSON object:

    {"results": [{"problems": [...], "operation": "GET /posts/{postId}"}
                 for each answer],                      (operation: "OTHER
                    <path>" for a 405, null for an undocumented path)
     "codes": [...]                          every error code documented,
     "operations": ["GET /users/{uid}/timeline", ...]   every documented one,
     "paths": [...]}                                     every documented path

An answer is checked against the operation of its path (the paths'
templates, {name} standing for one segment) and method:

- its status is one the operation documents;
- each header the response documents as required is there, and each
  documented header that is there matches its schema;
- a response documented with content has a JSON body (application/json)
  that validates against its schema (JSON Schema 2020-12, as OpenAPI 3.1
  has it, $refs resolved in the document); one documented without content,
  and any answer to HEAD, has no body.

A method the path does not document must be answered 405 with Allow
listing the documented ones (components/responses/MethodNotAllowed); a
path no template matches, 404 (components/responses/NotFound).
"""

import json
import re
import sys
import warnings

import jsonschema
import yaml

# in the order of the module's Allow headers
METHODS = ['get', 'head', 'post', 'put', 'delete', 'options', 'patch',
           'trace']


def load(spec_file):
    with open(spec_file, encoding='utf-8') as f:
        return yaml.safe_load(f)


class Checker:

    def __init__(self, spec):
        self.spec = spec
        self.resolver = jsonschema.RefResolver.from_schema(spec)
        self.templates = []
        for path in spec.get('paths', {}):
            rx = '^' + re.sub(r'\\\{[^}]+\\\}', '[^/]+',
                              re.escape(path)) + '$'
            self.templates.append((re.compile(rx), path))

    def deref(self, obj):
        while isinstance(obj, dict) and '$ref' in obj:
            _, obj = self.resolver.resolve(obj['$ref'])
        return obj

    def template(self, path):
        found = [t for rx, t in self.templates if rx.match(path)]
        return found[0] if len(found) == 1 else None

    def methods(self, template):
        item = self.spec['paths'][template]
        return [m for m in METHODS if m in item]

    def operations(self):
        return ['%s %s' % (m.upper(), t) for t in self.spec['paths']
                for m in self.methods(t)]

    def validate(self, schema, value, what):
        v = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
        return ['%s: %s (at %s)' % (what, e.message,
                                    '/'.join(str(p) for p in e.absolute_path)
                                    or 'top')
                for e in sorted(v.iter_errors(value), key=str)]

    def check_response(self, resp, a, where):
        resp = self.deref(resp)
        problems = []
        headers = a.get('headers', {})

        for name, h in (resp.get('headers') or {}).items():
            h = self.deref(h)
            value = headers.get(name.lower())
            if value is None:
                if h.get('required'):
                    problems.append('%s: no %s header' % (where, name))
                continue
            if 'schema' in h:
                problems += self.validate(h['schema'], value,
                                          '%s: header %s %r' % (where, name,
                                                                value))

        body = a.get('body', '')
        content = resp.get('content')

        if a['method'] == 'HEAD' or not content:
            if body != '':
                problems.append('%s: a body where none is documented: %r'
                                % (where, body[:200]))
            return problems

        ctype = headers.get('content-type', '')

        # a text answer (/metrics: Prometheus' format, which t/metrics.t
        # parses): its media type only
        if 'application/json' not in content:
            media = [m for m in content if ctype.lower().startswith(m)]
            if not media:
                problems.append('%s: content-type %r, not one of %s'
                                % (where, ctype, sorted(content)))
            return problems

        if not ctype.lower().startswith('application/json'):
            problems.append('%s: content-type %r, not application/json'
                            % (where, ctype))
            return problems

        try:
            value = json.loads(body)
        except ValueError as e:
            return problems + ['%s: not JSON (%s): %r'
                               % (where, e, body[:200])]

        schema = content.get('application/json', {}).get('schema')
        if schema is None:
            return problems + ['%s: no application/json schema documented'
                               % where]

        return problems + self.validate(schema, value, '%s: body' % where)

    def check(self, a):
        method = a['method'].upper()
        status = str(a['status'])
        template = self.template(a['path'])
        components = self.spec.get('components', {}).get('responses', {})

        if template is None:
            where = '%s %s (no documented path) %s' % (method, a['path'],
                                                       status)
            if status != '404':
                return ['%s: not 404' % where], None
            return self.check_response(components['NotFound'], a,
                                       where), None

        op = self.spec['paths'][template].get(method.lower())
        where = '%s %s %s' % (method, template, status)

        if op is None:
            allowed = ', '.join(m.upper() for m in self.methods(template))
            if status != '405':
                return ['%s: an undocumented method not answered 405'
                        % where], None
            problems = self.check_response(components['MethodNotAllowed'],
                                           a, where)
            allow = a.get('headers', {}).get('allow')
            if allow is not None and allow != allowed:
                problems.append('%s: Allow %r, documented %r'
                                % (where, allow, allowed))
            return problems, 'OTHER ' + template

        resp = op.get('responses', {}).get(status)
        if resp is None:
            return ['%s: status %s not documented for %s %s (%s)'
                    % (where, status, method, template,
                       ', '.join(sorted(op.get('responses', {}))))], \
                '%s %s' % (method, template)

        return self.check_response(resp, a, where), \
            '%s %s' % (method, template)


def error_codes(node):
    """every value of an enum of an "error" property, anywhere"""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == 'error' and isinstance(v, dict) and 'enum' in v:
                yield from v['enum']
            else:
                yield from error_codes(v)
    elif isinstance(node, list):
        for v in node:
            yield from error_codes(v)


def main(spec_file, answers_file):
    # RefResolver: Debian's jsonschema (4.10) has no other; later ones
    # warn that it is deprecated
    warnings.simplefilter('ignore', DeprecationWarning)

    checker = Checker(load(spec_file))

    with open(answers_file, encoding='utf-8') as f:
        answers = json.load(f)

    results = []
    for a in answers:
        problems, op = checker.check(a)
        results.append({'problems': problems, 'operation': op})

    json.dump({'results': results,
               'codes': sorted(set(error_codes(checker.spec))),
               'operations': checker.operations(),
               'paths': list(checker.spec['paths'])}, sys.stdout)


if __name__ == '__main__':
    main(*sys.argv[1:])
