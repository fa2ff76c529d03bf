
/*
 * Fuzz target: JSON made compact (ngx_http_feed_json_squeeze() and
 * ngx_http_feed_json_text(), core/ngx_http_feed_json.c), which every JSON
 * the module writes goes through.
 *
 * Any input is squeezed: only spaces, tabs and line breaks are taken out,
 * and squeezing again changes nothing.  An input that libbson reads as a
 * document is written back by libbson, as relaxed extended JSON and as
 * the module writes it: both read again give the same document (a string
 * keeps its spaces, its \" and its \\), and the module's is the other
 * squeezed, NUL-ended.
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_json.h"


static void ngx_http_feed_fuzz_squeezed(u_char *in, size_t len);
static void ngx_http_feed_fuzz_document(const bson_t *doc);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bson_t   doc;
    u_char  *in;

    ngx_http_feed_fuzz_init();

    /* a copy of its own size: ASan sees a read or a write past it */

    in = malloc(size ? size : 1);
    if (in == NULL) {
        return 0;
    }

    ngx_memcpy(in, data, size);
    ngx_http_feed_fuzz_squeezed(in, size);
    free(in);

    if (size && bson_init_from_json(&doc, (const char *) data, size, NULL)) {
        ngx_http_feed_fuzz_document(&doc);
        bson_destroy(&doc);
    }

    return 0;
}


/* in, len bytes, squeezed: what went is whitespace, and it stays so */

static void
ngx_http_feed_fuzz_squeezed(u_char *in, size_t len)
{
    size_t   n, again, i, j;
    u_char  *out;

    out = malloc(len ? len : 1);
    if (out == NULL) {
        return;
    }

    ngx_memcpy(out, in, len);

    n = ngx_http_feed_json_squeeze(out, len);

    ngx_http_feed_fuzz_assert(n <= len, "squeezed longer than the input");

    for (i = 0, j = 0; i < len; i++) {
        if (j < n && in[i] == out[j]) {
            j++;
            continue;
        }

        if (in[i] != ' ' && in[i] != '\t' && in[i] != '\n' && in[i] != '\r')
        {
            ngx_http_feed_fuzz_fail("a byte squeezed out that is not "
                                    "whitespace", in, len);
        }
    }

    ngx_http_feed_fuzz_assert(j == n, "squeezed bytes that the input has "
                              "not, in its order");

    again = ngx_http_feed_json_squeeze(out, n);

    ngx_http_feed_fuzz_assert(again == n, "squeezed twice, shorter again");

    free(out);
}


/* a document written as the module writes it is the same document */

static void
ngx_http_feed_fuzz_document(const bson_t *doc)
{
    char    *plain, *compact;
    size_t   plen, clen, n;
    bson_t   a, b;
    u_char  *copy;

    plain = bson_as_relaxed_extended_json(doc, &plen);
    compact = ngx_http_feed_json_text(doc, &clen);

    if (plain == NULL || compact == NULL) {
        ngx_http_feed_fuzz_assert(plain == NULL && compact == NULL,
                                  "libbson wrote a document once, not "
                                  "twice");
        bson_free(plain);
        bson_free(compact);
        return;
    }

    ngx_http_feed_fuzz_assert(compact[clen] == '\0'
                              && strlen(compact) == clen,
                              "compact JSON not NUL-ended at its length");

    copy = malloc(plen ? plen : 1);

    if (copy != NULL) {
        ngx_memcpy(copy, plain, plen);
        n = ngx_http_feed_json_squeeze(copy, plen);

        if (n != clen || ngx_memcmp(copy, compact, n) != 0) {
            ngx_http_feed_fuzz_fail("the text of a document is not its "
                                    "JSON squeezed", (u_char *) compact,
                                    clen);
        }

        free(copy);
    }

    if (bson_init_from_json(&a, plain, plen, NULL)) {

        if (!bson_init_from_json(&b, compact, clen, NULL)) {
            ngx_http_feed_fuzz_fail("compact JSON that libbson does not "
                                    "read", (u_char *) compact, clen);
        }

        if (!bson_equal(&a, &b)) {
            ngx_http_feed_fuzz_fail("compact JSON read as another document",
                                    (u_char *) compact, clen);
        }

        bson_destroy(&b);
        bson_destroy(&a);
    }

    bson_free(plain);
    bson_free(compact);
}
