/*
 * bench/seed.c: appends N follow documents (f1..fN follow AUTHOR), in the
 * module's schema (docs/storage.md), to the MongoDB stand-in's data file,
 * for the fanout bench.  The stand-in inserts them at its next start and
 * builds its indexes once after: inserted one by one through a driver,
 * its unique index check would scan the collection for each of 100,000.
 *
 *   seed FILE DATABASE AUTHOR N [FORMAT]
 *
 * FORMAT names the followers from 1 to N, "f%d" by default.
 */

#include <bson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


static int
seed_write(FILE *f, const char *db, const char *coll, bson_t *d)
{
    int      ok;
    bson_t  *rec;

    rec = BCON_NEW("t", BCON_UTF8("doc"), "db", BCON_UTF8(db),
                   "coll", BCON_UTF8(coll), "d", BCON_DOCUMENT(d));

    ok = fwrite(bson_get_data(rec), 1, rec->len, f) == rec->len;

    bson_destroy(rec);

    return ok;
}


int
main(int argc, char **argv)
{
    int          i, n;
    FILE        *f;
    char         src[65];
    const char  *format;
    bson_t      *doc;
    int64_t      now;
    bson_oid_t   oid;

    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: seed FILE DATABASE AUTHOR N [FORMAT]\n");
        return 2;
    }

    format = (argc == 6) ? argv[5] : "f%d";

    f = fopen(argv[1], "ab");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }

    n = atoi(argv[4]);
    now = (int64_t) time(NULL) * 1000;

    for (i = 1; i <= n; i++) {
        snprintf(src, sizeof(src), format, i);
        bson_oid_init(&oid, NULL);

        /* f1 is the newest relationship: the first one fanout reaches */

        doc = BCON_NEW("_id", BCON_OID(&oid),
                       "src", BCON_UTF8(src), "dst", BCON_UTF8(argv[3]),
                       "status", BCON_INT32(1),
                       "created", BCON_DATE_TIME(now - i),
                       "updated", BCON_DATE_TIME(now - i),
                       "v", BCON_INT64(1), "cv", BCON_INT64(1));

        if (!seed_write(f, argv[2], "follows", doc)) {
            perror("seed");
            return 1;
        }

        bson_destroy(doc);
    }

    doc = BCON_NEW("_id", BCON_UTF8(argv[3]), "followers", BCON_INT64(n),
                   "following", BCON_INT64(0));

    if (!seed_write(f, argv[2], "follow_counts", doc) || fclose(f) != 0) {
        perror("seed");
        return 1;
    }

    bson_destroy(doc);

    return 0;
}
