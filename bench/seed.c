/*
 * bench/seed.c: appends N follow documents (f1..fN follow AUTHOR), in the
 * module's schema (docs/storage.md), to the MongoDB stand-in's data file,
 * for the fanout bench.  The stand-in inserts them at its next start and
 * builds its indexes once after: inserted one by one through a driver,
 * its unique index check would scan the collection for each of 100,000.
 *
 *   seed FILE DATABASE AUTHOR N [FORMAT]
 *   seed -p FILE DATABASE AUTHOR N
 *
 * FORMAT names the followers from 1 to N, "f%d" by default.  With -p it
 * appends N posts by AUTHOR instead ("post 1" the oldest), for tests of
 * large timelines: through the API each post is a MongoDB insert, a
 * stream entry and a fanout.
 */

#include <bson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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


static int
seed_follows(FILE *f, const char *db, const char *author, int n,
    const char *format)
{
    int          i;
    char         src[65];
    bson_t      *doc;
    int64_t      now;
    bson_oid_t   oid;

    now = (int64_t) time(NULL) * 1000;

    for (i = 1; i <= n; i++) {
        snprintf(src, sizeof(src), format, i);
        bson_oid_init(&oid, NULL);

        /* f1 is the newest relationship: the first one fanout reaches */

        doc = BCON_NEW("_id", BCON_OID(&oid),
                       "src", BCON_UTF8(src), "dst", BCON_UTF8(author),
                       "status", BCON_INT32(1),
                       "created", BCON_DATE_TIME(now - i),
                       "updated", BCON_DATE_TIME(now - i),
                       "v", BCON_INT64(1), "cv", BCON_INT64(1));

        if (!seed_write(f, db, "follows", doc)) {
            return 0;
        }

        bson_destroy(doc);
    }

    doc = BCON_NEW("_id", BCON_UTF8(author), "followers", BCON_INT64(n),
                   "following", BCON_INT64(0));

    if (!seed_write(f, db, "follow_counts", doc)) {
        return 0;
    }

    bson_destroy(doc);

    return 1;
}


/* ids from one process increase (libbson's counter): "post N" the newest */

static int
seed_posts(FILE *f, const char *db, const char *author, int n)
{
    int          i;
    char         body[32];
    bson_t      *doc;
    int64_t      now;
    bson_oid_t   oid;

    now = (int64_t) time(NULL) * 1000;

    for (i = 1; i <= n; i++) {
        snprintf(body, sizeof(body), "post %d", i);
        bson_oid_init(&oid, NULL);

        doc = BCON_NEW("_id", BCON_OID(&oid), "author", BCON_UTF8(author),
                       "body", BCON_UTF8(body), "ts", BCON_INT64(now));

        if (!seed_write(f, db, "posts", doc)) {
            return 0;
        }

        bson_destroy(doc);
    }

    return 1;
}


int
main(int argc, char **argv)
{
    int    posts, ok;
    FILE  *f;

    posts = (argc > 1 && strcmp(argv[1], "-p") == 0);
    argv += posts;
    argc -= posts;

    if (argc != 5 && !(argc == 6 && !posts)) {
        fprintf(stderr, "usage: seed FILE DATABASE AUTHOR N [FORMAT]\n"
                        "       seed -p FILE DATABASE AUTHOR N\n");
        return 2;
    }

    f = fopen(argv[1], "ab");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }

    if (posts) {
        ok = seed_posts(f, argv[2], argv[3], atoi(argv[4]));

    } else {
        ok = seed_follows(f, argv[2], argv[3], atoi(argv[4]),
                          (argc == 6) ? argv[5] : "f%d");
    }

    if (!ok || fclose(f) != 0) {
        perror("seed");
        return 1;
    }

    return 0;
}
