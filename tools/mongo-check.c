/*
 * mongo-check: exercise a MongoDB server (meant for tools/mongod-standin)
 * through libmongoc 1.23's documented API and print TAP.
 *
 * Build:  cc tools/mongo-check.c $(pkg-config --cflags --libs libmongoc-1.0) \
 *            -o build/mongo-check
 * Usage:  mongo-check URI [all|persist-write|persist-read|latency|failpoint]
 *
 *   all            the full functional check (default); drops its databases
 *   persist-write  write a few things into database standin_persist
 *   persist-read   check they are still there (after a server restart)
 *   latency        time pings: prints "# ping_ms=N", "# ping2_ms=N" and
 *                  "# parallel_ms=N" (wall time of 4 concurrent pings on 4
 *                  pooled connections)
 *   failpoint      the failCommand fail point as libmongoc sees its effects
 *                  (errors, closed and blocked connections); leaves it off
 *
 * Exit status 0 iff every test passed.
 */

#include <mongoc/mongoc.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DB_NAME "standin_check"
#define PERSIST_DB "standin_persist"
#define N_ITEMS 250
#define N_THREADS 4
#define FP_DB "standin_fp"
#define FP_MSG "Failing command via 'failCommand' failpoint"

static int test_num;
static int failures;

static bool
ok (bool cond, const char *fmt, ...)
{
   va_list ap;

   test_num++;
   if (!cond) {
      failures++;
   }
   printf ("%sok %d - ", cond ? "" : "not ", test_num);
   va_start (ap, fmt);
   vprintf (fmt, ap);
   va_end (ap);
   printf ("\n");
   fflush (stdout);
   return cond;
}

static void
diag (const char *fmt, ...)
{
   va_list ap;

   printf ("# ");
   va_start (ap, fmt);
   vprintf (fmt, ap);
   va_end (ap);
   printf ("\n");
   fflush (stdout);
}

static void
diag_error (const char *what, const bson_error_t *error)
{
   diag ("%s: domain %u code %u: %s", what, error->domain, error->code,
         error->message);
}

static void
diag_doc (const char *what, const bson_t *doc)
{
   char *json = bson_as_relaxed_extended_json (doc, NULL);

   diag ("%s: %s", what, json ? json : "(null)");
   bson_free (json);
}

static double
now_ms (void)
{
   struct timespec ts;

   clock_gettime (CLOCK_MONOTONIC, &ts);
   return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* Integer at a dotted path, or `missing` when absent / not a number. */
static int64_t
get_int (const bson_t *doc, const char *path, int64_t missing)
{
   bson_iter_t it, child;

   if (!doc || !bson_iter_init (&it, doc) ||
       !bson_iter_find_descendant (&it, path, &child) ||
       !BSON_ITER_HOLDS_NUMBER (&child)) {
      return missing;
   }
   return bson_iter_as_int64 (&child);
}

static bool
has_field (const bson_t *doc, const char *path)
{
   bson_iter_t it, child;

   return doc && bson_iter_init (&it, doc) &&
          bson_iter_find_descendant (&it, path, &child);
}

static bson_type_t
field_type (const bson_t *doc, const char *path)
{
   bson_iter_t it, child;

   if (!doc || !bson_iter_init (&it, doc) ||
       !bson_iter_find_descendant (&it, path, &child)) {
      return BSON_TYPE_EOD;
   }
   return bson_iter_type (&child);
}

static bool
str_is (const bson_t *doc, const char *path, const char *want)
{
   bson_iter_t it, child;

   return doc && bson_iter_init (&it, doc) &&
          bson_iter_find_descendant (&it, path, &child) &&
          BSON_ITER_HOLDS_UTF8 (&child) &&
          strcmp (bson_iter_utf8 (&child, NULL), want) == 0;
}

/* Comma-joined strings of an array field, e.g. "b,d,e", into buf. */
static const char *
join_array (const bson_t *doc, const char *path, char *buf, size_t len)
{
   bson_iter_t it, child, arr;

   buf[0] = '\0';
   if (!doc || !bson_iter_init (&it, doc) ||
       !bson_iter_find_descendant (&it, path, &child) ||
       !BSON_ITER_HOLDS_ARRAY (&child) || !bson_iter_recurse (&child, &arr)) {
      return "(missing)";
   }
   while (bson_iter_next (&arr)) {
      if (buf[0]) {
         bson_strncpy (buf + strlen (buf), ",", len - strlen (buf));
      }
      bson_strncpy (buf + strlen (buf),
                    BSON_ITER_HOLDS_UTF8 (&arr) ? bson_iter_utf8 (&arr, NULL)
                                                : "?",
                    len - strlen (buf));
   }
   return buf;
}

static bool
ping (mongoc_client_t *client, bson_error_t *error)
{
   bson_t *cmd = BCON_NEW ("ping", BCON_INT32 (1));
   bool r = mongoc_client_command_simple (client, "admin", cmd, NULL, NULL,
                                          error);

   bson_destroy (cmd);
   return r;
}

/* Run a find; return the number of documents, -1 on error. */
static int
count_find (mongoc_collection_t *coll, const bson_t *filter, const bson_t *opts)
{
   mongoc_cursor_t *cursor =
      mongoc_collection_find_with_opts (coll, filter, opts, NULL);
   const bson_t *doc;
   bson_error_t error;
   int n = 0;

   while (mongoc_cursor_next (cursor, &doc)) {
      n++;
   }
   if (mongoc_cursor_error (cursor, &error)) {
      diag_error ("find", &error);
      n = -1;
   }
   mongoc_cursor_destroy (cursor);
   return n;
}

/* First document matching filter (copy, or NULL). */
static bson_t *
find_one (mongoc_collection_t *coll, const bson_t *filter)
{
   bson_t *opts = BCON_NEW ("limit", BCON_INT64 (1));
   mongoc_cursor_t *cursor =
      mongoc_collection_find_with_opts (coll, filter, opts, NULL);
   const bson_t *doc;
   bson_t *res = NULL;

   if (mongoc_cursor_next (cursor, &doc)) {
      res = bson_copy (doc);
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   return res;
}

/* ---------------------------------------------------------------------- */

struct thread_arg {
   mongoc_client_pool_t *pool;
   int id;
   int mode; /* 0: finds, 1: one ping */
   int good;
   double ms;
};

static void *
worker (void *p)
{
   struct thread_arg *arg = p;
   mongoc_client_t *client = mongoc_client_pool_pop (arg->pool);
   bson_error_t error;
   double t0 = now_ms ();

   arg->good = 0;
   if (arg->mode == 1) {
      arg->good = ping (client, &error) ? 1 : 0;
   } else {
      mongoc_collection_t *coll =
         mongoc_client_get_collection (client, DB_NAME, "items");
      int it;

      for (it = 0; it < 10; it++) {
         bson_t *filter = BCON_NEW ("i", "{", "$lt", BCON_INT32 (100), "}");
         bson_t *opts = BCON_NEW ("sort", "{", "i", BCON_INT32 (1), "}",
                                  "batchSize", BCON_INT32 (30 + arg->id));
         mongoc_cursor_t *cursor =
            mongoc_collection_find_with_opts (coll, filter, opts, NULL);
         const bson_t *doc;
         int n = 0;
         bool ordered = true;

         while (mongoc_cursor_next (cursor, &doc)) {
            if (get_int (doc, "i", -1) != n) {
               ordered = false;
            }
            n++;
         }
         if (n == 100 && ordered && !mongoc_cursor_error (cursor, &error)) {
            arg->good++;
         }
         mongoc_cursor_destroy (cursor);
         bson_destroy (opts);
         bson_destroy (filter);
      }
      mongoc_collection_destroy (coll);
   }
   arg->ms = now_ms () - t0;
   mongoc_client_pool_push (arg->pool, client);
   return NULL;
}

/* Run N_THREADS workers concurrently; return wall time in ms. */
static double
run_threads (mongoc_client_pool_t *pool, int mode, struct thread_arg *args)
{
   pthread_t th[N_THREADS];
   double t0 = now_ms ();
   int i;

   for (i = 0; i < N_THREADS; i++) {
      args[i].pool = pool;
      args[i].id = i;
      args[i].mode = mode;
      pthread_create (&th[i], NULL, worker, &args[i]);
   }
   for (i = 0; i < N_THREADS; i++) {
      pthread_join (th[i], NULL);
   }
   return now_ms () - t0;
}

/* ---------------------------------------------------------------------- */

static void
check_all (mongoc_client_pool_t *pool)
{
   mongoc_client_t *client = mongoc_client_pool_pop (pool);
   mongoc_database_t *db = mongoc_client_get_database (client, DB_NAME);
   mongoc_collection_t *items = mongoc_database_get_collection (db, "items");
   mongoc_collection_t *users = mongoc_database_get_collection (db, "users");
   bson_error_t error;
   bson_t reply;
   bson_t *filter, *update, *opts, *doc;
   const bson_t *cdoc;
   mongoc_cursor_t *cursor;
   bool r;
   int i, n;
   char buf[256];

   /* --- ping / clean slate ------------------------------------------- */
   r = ping (client, &error);
   if (!ok (r, "ping")) {
      diag_error ("ping", &error);
   }
   r = mongoc_database_drop (db, &error);
   if (!ok (r, "dropDatabase on a fresh database")) {
      diag_error ("drop", &error);
   }
   {
      bson_t *cmd = BCON_NEW ("hello", BCON_INT32 (1));
      r = mongoc_client_command_simple (client, "admin", cmd, NULL, &reply,
                                        &error);
      ok (r && has_field (&reply, "isWritablePrimary") &&
             get_int (&reply, "maxWireVersion", 0) == 13 &&
             get_int (&reply, "maxBsonObjectSize", 0) == 16777216,
          "hello: writable primary, maxWireVersion 13");
      bson_destroy (&reply);
      bson_destroy (cmd);
   }
   {
      bson_t *cmd = BCON_NEW ("buildInfo", BCON_INT32 (1));
      r = mongoc_client_command_simple (client, "admin", cmd, NULL, &reply,
                                        &error);
      ok (r && get_int (&reply, "versionArray.0", 0) >= 5,
          "buildInfo says version 5+");
      bson_destroy (&reply);
      bson_destroy (cmd);
   }

   /* --- inserts ------------------------------------------------------ */
   {
      bson_oid_t oid;
      bson_t *one;

      bson_oid_init (&oid, NULL);
      one = BCON_NEW ("_id", BCON_OID (&oid), "name", BCON_UTF8 ("single"));
      r = mongoc_collection_insert_one (items, one, NULL, &reply, &error);
      ok (r && get_int (&reply, "insertedCount", 0) == 1,
          "insert_one with a client ObjectId");
      if (!r) {
         diag_error ("insert_one", &error);
      }
      bson_destroy (&reply);
      filter = BCON_NEW ("_id", BCON_OID (&oid));
      doc = find_one (items, filter);
      ok (doc && field_type (doc, "_id") == BSON_TYPE_OID &&
             str_is (doc, "name", "single"),
          "find by ObjectId _id returns it, _id still an ObjectId");
      if (doc) {
         bson_destroy (doc);
      }
      bson_destroy (filter);
      bson_destroy (one);
   }
   {
      bson_t *docs[N_ITEMS];

      for (i = 0; i < N_ITEMS; i++) {
         char name[32];

         bson_snprintf (name, sizeof name, "n%03d", i);
         docs[i] = BCON_NEW ("i", BCON_INT32 (i), "grp", BCON_INT32 (i % 5),
                             "name", BCON_UTF8 (name));
      }
      r = mongoc_collection_insert_many (items, (const bson_t **) docs,
                                         N_ITEMS, NULL, &reply, &error);
      ok (r && get_int (&reply, "insertedCount", 0) == N_ITEMS,
          "insert_many %d documents", N_ITEMS);
      if (!r) {
         diag_error ("insert_many", &error);
      }
      bson_destroy (&reply);
      for (i = 0; i < N_ITEMS; i++) {
         bson_destroy (docs[i]);
      }
   }

   /* --- find with sort/skip/limit/projection over several batches ---- */
   filter = BCON_NEW ("i", "{", "$gte", BCON_INT32 (10), "}");
   opts = BCON_NEW ("sort", "{", "i", BCON_INT32 (-1), "}", "skip",
                    BCON_INT64 (5), "limit", BCON_INT64 (200), "projection",
                    "{", "i", BCON_INT32 (1), "_id", BCON_INT32 (0), "}",
                    "batchSize", BCON_INT32 (40));
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   {
      bool order_ok = true, proj_ok = true;
      int64_t cursor_id = -1;

      n = 0;
      while (mongoc_cursor_next (cursor, &cdoc)) {
         if (n == 0) {
            cursor_id = mongoc_cursor_get_id (cursor);
         }
         if (get_int (cdoc, "i", -1) != 244 - n) {
            order_ok = false;
         }
         if (has_field (cdoc, "_id") || has_field (cdoc, "grp")) {
            proj_ok = false;
         }
         n++;
      }
      r = !mongoc_cursor_error (cursor, &error);
      if (!r) {
         diag_error ("find", &error);
      }
      ok (r && n == 200, "find skip 5 limit 200 batchSize 40 gives 200 (%d)",
          n);
      ok (order_ok, "find sorted descending, skip applied");
      ok (proj_ok, "projection {i:1,_id:0} applied");
      ok (cursor_id > 0, "server kept a real cursor after the first batch");
      ok (mongoc_cursor_get_id (cursor) == 0, "cursor exhausted at the end");
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   bson_destroy (filter);

   /* singleBatch: one batch, no cursor left open */
   filter = bson_new ();
   opts = BCON_NEW ("limit", BCON_INT64 (5), "singleBatch", BCON_BOOL (true));
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   n = 0;
   while (mongoc_cursor_next (cursor, &cdoc)) {
      n++;
   }
   ok (n == 5 && mongoc_cursor_get_id (cursor) == 0,
       "find limit 5 singleBatch: 5 docs, cursor id 0");
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   /* libmongoc 1.23 passes a negative limit through; mongod rejects it */
   opts = BCON_NEW ("limit", BCON_INT64 (-5));
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   r = mongoc_cursor_next (cursor, &cdoc);
   ok (!r && mongoc_cursor_error (cursor, &error),
       "find limit -5 is an error like on mongod (%u %s)", error.code,
       error.message);
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   /* killCursors: abandon a cursor half way */
   opts = BCON_NEW ("batchSize", BCON_INT32 (3));
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   r = mongoc_cursor_next (cursor, &cdoc) && mongoc_cursor_get_id (cursor) > 0;
   mongoc_cursor_destroy (cursor); /* sends killCursors */
   ok (r, "abandoned cursor (killCursors on destroy)");
   bson_destroy (opts);

   /* sort on ObjectId _id: libmongoc-generated ids increase */
   opts = BCON_NEW ("sort", "{", "_id", BCON_INT32 (1), "}", "batchSize",
                    BCON_INT32 (100));
   bson_destroy (filter);
   filter = BCON_NEW ("i", "{", "$exists", BCON_BOOL (true), "}");
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   {
      bool order_ok = true, oid_ok = true;

      n = 0;
      while (mongoc_cursor_next (cursor, &cdoc)) {
         if (get_int (cdoc, "i", -1) != n) {
            order_ok = false;
         }
         if (field_type (cdoc, "_id") != BSON_TYPE_OID) {
            oid_ok = false;
         }
         n++;
      }
      ok (n == N_ITEMS && order_ok && oid_ok,
          "sort by ObjectId _id follows insertion order (%d docs)", n);
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   bson_destroy (filter);

   /* unknown find option is rejected like mongod does */
   filter = bson_new ();
   opts = BCON_NEW ("bogusOption", BCON_INT32 (1));
   cursor = mongoc_collection_find_with_opts (items, filter, opts, NULL);
   r = mongoc_cursor_next (cursor, &cdoc);
   ok (!r && mongoc_cursor_error (cursor, &error) && error.code == 40415,
       "unknown find field -> error 40415 (%u %s)", error.code, error.message);
   mongoc_cursor_destroy (cursor);
   bson_destroy (opts);
   bson_destroy (filter);

   /* --- concurrent finds on a pool ---------------------------------- */
   {
      struct thread_arg args[N_THREADS];
      int good = 0;

      run_threads (pool, 0, args);
      for (i = 0; i < N_THREADS; i++) {
         good += args[i].good;
      }
      ok (good == N_THREADS * 10, "%d threads x 10 pooled finds all right (%d)",
          N_THREADS, good);
   }

   /* --- updates ------------------------------------------------------ */
   filter = BCON_NEW ("name", BCON_UTF8 ("up1"));
   update = BCON_NEW ("$set", "{", "a", BCON_INT32 (1), "}", "$setOnInsert",
                      "{", "created", BCON_BOOL (true), "}", "$inc", "{", "cnt",
                      BCON_INT64 (1), "}");
   opts = BCON_NEW ("upsert", BCON_BOOL (true));
   r = mongoc_collection_update_one (items, filter, update, opts, &reply,
                                     &error);
   ok (r && get_int (&reply, "matchedCount", -1) == 0 &&
          get_int (&reply, "upsertedCount", -1) == 1 &&
          field_type (&reply, "upsertedId") == BSON_TYPE_OID,
       "update_one upsert inserts ($set/$setOnInsert/$inc)");
   if (!r) {
      diag_error ("upsert", &error);
   }
   diag_doc ("upsert reply", &reply);
   bson_destroy (&reply);
   r = mongoc_collection_update_one (items, filter, update, opts, &reply,
                                     &error);
   ok (r && get_int (&reply, "matchedCount", -1) == 1 &&
          get_int (&reply, "modifiedCount", -1) == 1 &&
          !has_field (&reply, "upsertedId"),
       "update_one upsert on existing doc updates it");
   bson_destroy (&reply);
   doc = find_one (items, filter);
   ok (doc && get_int (doc, "cnt", 0) == 2 && get_int (doc, "a", 0) == 1 &&
          field_type (doc, "created") == BSON_TYPE_BOOL &&
          field_type (doc, "cnt") == BSON_TYPE_INT64,
       "$inc applied twice, NumberLong kept, $setOnInsert only once");
   if (doc) {
      bson_destroy (doc);
   }
   bson_destroy (opts);
   bson_destroy (update);

   /* $push with $each / $position / $slice, then $pull */
   {
      const char *steps[] = {
         "{\"$push\": {\"tags\": {\"$each\": [\"a\", \"b\", \"c\"]}}}",
         "{\"$push\": {\"tags\": {\"$each\": [\"z\"], \"$position\": 0}}}",
         "{\"$push\": {\"tags\": {\"$each\": [\"d\", \"e\"], \"$slice\": -4}}}",
         "{\"$pull\": {\"tags\": \"c\"}}",
         "{\"$pull\": {\"tags\": {\"$in\": [\"d\"]}}}",
      };
      const char *want[] = {"a,b,c", "z,a,b,c", "b,c,d,e", "b,d,e", "b,e"};

      for (i = 0; i < 5; i++) {
         update = bson_new_from_json ((const uint8_t *) steps[i], -1, &error);
         r = mongoc_collection_update_one (items, filter, update, NULL, NULL,
                                           &error);
         doc = find_one (items, filter);
         ok (r && doc &&
                strcmp (join_array (doc, "tags", buf, sizeof buf), want[i]) ==
                   0,
             "%s -> [%s] (%s)", steps[i], want[i],
             doc ? join_array (doc, "tags", buf, sizeof buf) : "none");
         if (doc) {
            bson_destroy (doc);
         }
         bson_destroy (update);
      }
   }
   bson_destroy (filter);

   filter = BCON_NEW ("grp", BCON_INT32 (0));
   update = BCON_NEW ("$inc", "{", "score", BCON_INT32 (5), "}");
   r = mongoc_collection_update_many (items, filter, update, NULL, &reply,
                                      &error);
   ok (r && get_int (&reply, "matchedCount", -1) == 50 &&
          get_int (&reply, "modifiedCount", -1) == 50,
       "update_many matched/modified 50");
   bson_destroy (&reply);
   bson_destroy (update);
   bson_destroy (filter);

   /* --- deletes ------------------------------------------------------ */
   filter = BCON_NEW ("grp", BCON_INT32 (1));
   r = mongoc_collection_delete_one (items, filter, NULL, &reply, &error);
   ok (r && get_int (&reply, "deletedCount", -1) == 1, "delete_one");
   bson_destroy (&reply);
   r = mongoc_collection_delete_many (items, filter, NULL, &reply, &error);
   ok (r && get_int (&reply, "deletedCount", -1) == 49, "delete_many 49");
   bson_destroy (&reply);
   bson_destroy (filter);

   /* --- unacknowledged write (OP_MSG moreToCome) --------------------- */
   {
      mongoc_write_concern_t *wc = mongoc_write_concern_new ();
      bson_t *w0doc = BCON_NEW ("name", BCON_UTF8 ("w0"));

      mongoc_write_concern_set_w (wc, MONGOC_WRITE_CONCERN_W_UNACKNOWLEDGED);
      opts = bson_new ();
      mongoc_write_concern_append (wc, opts);
      r = mongoc_collection_insert_one (items, w0doc, opts, NULL, &error);
      filter = BCON_NEW ("name", BCON_UTF8 ("w0"));
      ok (r && count_find (items, filter, NULL) == 1,
          "unacknowledged (w:0) insert is applied");
      mongoc_collection_delete_many (items, filter, NULL, NULL, NULL);
      bson_destroy (filter);
      bson_destroy (opts);
      bson_destroy (w0doc);
      mongoc_write_concern_destroy (wc);
   }

   /* --- findAndModify ------------------------------------------------ */
   {
      mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new ();
      bson_t *fields = BCON_NEW ("v", BCON_INT32 (1));

      update = BCON_NEW ("$inc", "{", "v", BCON_INT32 (1), "}");
      mongoc_find_and_modify_opts_set_update (fam, update);
      mongoc_find_and_modify_opts_set_fields (fam, fields);
      mongoc_find_and_modify_opts_set_flags (
         fam, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);
      filter = BCON_NEW ("name", BCON_UTF8 ("fam"));
      r = mongoc_collection_find_and_modify_with_opts (items, filter, fam,
                                                       &reply, &error);
      ok (r && get_int (&reply, "value.v", -1) == 1 &&
             !has_field (&reply, "value.name") &&
             get_int (&reply, "lastErrorObject.n", -1) == 1 &&
             field_type (&reply, "lastErrorObject.upserted") ==
                BSON_TYPE_OID &&
             field_type (&reply, "lastErrorObject.updatedExisting") ==
                BSON_TYPE_BOOL,
          "findAndModify upsert+new+fields");
      if (!r) {
         diag_error ("findAndModify", &error);
      }
      diag_doc ("findAndModify reply", &reply);
      bson_destroy (&reply);
      r = mongoc_collection_find_and_modify_with_opts (items, filter, fam,
                                                       &reply, &error);
      ok (r && get_int (&reply, "value.v", -1) == 2 &&
             !has_field (&reply, "lastErrorObject.upserted"),
          "findAndModify again updates the existing doc");
      bson_destroy (&reply);
      mongoc_find_and_modify_opts_destroy (fam);
      bson_destroy (update);
      bson_destroy (fields);

      /* sort picks the doc; without new the old version comes back */
      fam = mongoc_find_and_modify_opts_new ();
      update = BCON_NEW ("$set", "{", "picked", BCON_BOOL (true), "}");
      opts = BCON_NEW ("i", BCON_INT32 (-1));
      mongoc_find_and_modify_opts_set_update (fam, update);
      mongoc_find_and_modify_opts_set_sort (fam, opts);
      {
         bson_t *q2 = BCON_NEW ("grp", BCON_INT32 (2));

         r = mongoc_collection_find_and_modify_with_opts (items, q2, fam,
                                                          &reply, &error);
         ok (r && get_int (&reply, "value.i", -1) == 247 &&
                !has_field (&reply, "value.picked") &&
                get_int (&reply, "lastErrorObject.n", -1) == 1,
             "findAndModify with sort returns the old document");
         bson_destroy (&reply);
         bson_destroy (q2);
      }
      mongoc_find_and_modify_opts_destroy (fam);
      bson_destroy (update);
      bson_destroy (opts);

      fam = mongoc_find_and_modify_opts_new ();
      mongoc_find_and_modify_opts_set_flags (fam,
                                             MONGOC_FIND_AND_MODIFY_REMOVE);
      r = mongoc_collection_find_and_modify_with_opts (items, filter, fam,
                                                       &reply, &error);
      ok (r && get_int (&reply, "value.v", -1) == 2 &&
             get_int (&reply, "lastErrorObject.n", -1) == 1 &&
             count_find (items, filter, NULL) == 0,
          "findAndModify remove");
      bson_destroy (&reply);
      r = mongoc_collection_find_and_modify_with_opts (items, filter, fam,
                                                       &reply, &error);
      ok (r && field_type (&reply, "value") == BSON_TYPE_NULL &&
             get_int (&reply, "lastErrorObject.n", -1) == 0,
          "findAndModify remove without match: value null, n 0");
      bson_destroy (&reply);
      mongoc_find_and_modify_opts_destroy (fam);
      bson_destroy (filter);
   }

   /* --- counts ------------------------------------------------------- */
   filter = BCON_NEW ("grp", BCON_INT32 (2));
   ok (mongoc_collection_count_documents (items, filter, NULL, NULL, NULL,
                                          &error) == 50,
       "count_documents grp 2 = 50");
   opts = BCON_NEW ("skip", BCON_INT64 (10), "limit", BCON_INT64 (15));
   ok (mongoc_collection_count_documents (items, filter, opts, NULL, NULL,
                                          &error) == 15,
       "count_documents with skip/limit = 15");
   bson_destroy (opts);
   bson_destroy (filter);
   {
      bson_t *all = bson_new ();
      int64_t exact =
         mongoc_collection_count_documents (items, all, NULL, NULL, NULL,
                                            &error);
      int64_t est = mongoc_collection_estimated_document_count (
         items, NULL, NULL, NULL, &error);

      /* 1 single + 250 - 50 deleted + up1 */
      ok (exact == 202 && est == exact,
          "estimated_document_count = count_documents = 202 (%d, %d)",
          (int) est, (int) exact);
      if (est < 0) {
         diag_error ("estimated_document_count", &error);
      }
      bson_destroy (all);
   }

   /* --- aggregate ---------------------------------------------------- */
   {
      bson_t *pipeline = BCON_NEW (
         "pipeline", "[",
         "{", "$match", "{", "grp", "{", "$in", "[", BCON_INT32 (2),
         BCON_INT32 (3), "]", "}", "}", "}",
         "{", "$group", "{", "_id", BCON_UTF8 ("$grp"), "total", "{", "$sum",
         BCON_UTF8 ("$i"), "}", "n", "{", "$sum", BCON_INT32 (1), "}", "}", "}",
         "{", "$sort", "{", "_id", BCON_INT32 (1), "}", "}",
         "{", "$limit", BCON_INT32 (5), "}",
         "{", "$project", "{", "n", BCON_INT32 (1), "total", BCON_INT32 (1),
         "}", "}", "]");
      int64_t got[4] = {0, 0, 0, 0};

      cursor = mongoc_collection_aggregate (items, MONGOC_QUERY_NONE, pipeline,
                                            NULL, NULL);
      n = 0;
      while (mongoc_cursor_next (cursor, &cdoc)) {
         if (n < 2) {
            got[n * 2] = get_int (cdoc, "n", -1);
            got[n * 2 + 1] = get_int (cdoc, "total", -1);
         }
         n++;
      }
      if (mongoc_cursor_error (cursor, &error)) {
         diag_error ("aggregate", &error);
      }
      ok (n == 2 && got[0] == 50 && got[1] == 6225 && got[2] == 50 &&
             got[3] == 6275,
          "aggregate $match/$group/$sort/$limit/$project");
      mongoc_cursor_destroy (cursor);
      bson_destroy (pipeline);

      pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "grp",
                           BCON_INT32 (4), "}", "}", "{", "$sort", "{", "i",
                           BCON_INT32 (1), "}", "}", "]");
      opts = BCON_NEW ("batchSize", BCON_INT32 (7));
      cursor = mongoc_collection_aggregate (items, MONGOC_QUERY_NONE, pipeline,
                                            opts, NULL);
      n = 0;
      while (mongoc_cursor_next (cursor, &cdoc)) {
         n++;
      }
      ok (n == 50 && !mongoc_cursor_error (cursor, &error),
          "aggregate cursor with batchSize 7 over 50 docs (getMore)");
      mongoc_cursor_destroy (cursor);
      bson_destroy (opts);
      bson_destroy (pipeline);
   }

   /* --- unique index ------------------------------------------------- */
   {
      bson_t *cmd = BCON_NEW ("createIndexes", BCON_UTF8 ("users"), "indexes",
                              "[", "{", "key", "{", "email", BCON_INT32 (1),
                              "}", "name", BCON_UTF8 ("email_1"), "unique",
                              BCON_BOOL (true), "}", "]");
      bson_t *u1 = BCON_NEW ("email", BCON_UTF8 ("a@x"), "n", BCON_INT32 (1));
      bson_t *u2 = BCON_NEW ("email", BCON_UTF8 ("a@x"), "n", BCON_INT32 (2));
      bson_t *u3 = BCON_NEW ("email", BCON_UTF8 ("b@x"));
      const bson_t *batch[3];
      bson_t *m1 = BCON_NEW ("email", BCON_UTF8 ("m1"));
      bson_t *m2 = BCON_NEW ("email", BCON_UTF8 ("m2"));

      r = mongoc_collection_write_command_with_opts (users, cmd, NULL, &reply,
                                                     &error);
      ok (r && get_int (&reply, "numIndexesAfter", -1) == 2,
          "createIndexes unique email_1");
      if (!r) {
         diag_error ("createIndexes", &error);
      }
      bson_destroy (&reply);
      r = mongoc_collection_write_command_with_opts (users, cmd, NULL, &reply,
                                                     &error);
      ok (r && get_int (&reply, "numIndexesAfter", -1) == 2,
          "createIndexes again with the identical index is ok");
      bson_destroy (&reply);

      r = mongoc_collection_insert_one (users, u1, NULL, NULL, &error);
      ok (r, "insert first a@x");
      r = mongoc_collection_insert_one (users, u2, NULL, &reply, &error);
      ok (!r && error.code == 11000 &&
             strstr (error.message, "E11000 duplicate key error") != NULL,
          "duplicate insert fails with 11000 (%u: %s)", error.code,
          error.message);
      ok (get_int (&reply, "writeErrors.0.code", -1) == 11000 &&
             get_int (&reply, "writeErrors.0.index", -1) == 0,
          "reply has writeErrors [{index 0, code 11000}]");
      diag_doc ("dup insert reply", &reply);
      bson_destroy (&reply);

      r = mongoc_collection_insert_one (users, u3, NULL, NULL, &error);
      ok (r, "insert b@x");
      filter = BCON_NEW ("email", BCON_UTF8 ("a@x"));
      update = BCON_NEW ("$set", "{", "email", BCON_UTF8 ("b@x"), "}");
      r = mongoc_collection_update_one (users, filter, update, NULL, &reply,
                                        &error);
      ok (!r && error.code == 11000, "update into a duplicate fails with 11000");
      bson_destroy (&reply);
      bson_destroy (filter);
      filter = BCON_NEW ("email", BCON_UTF8 ("c@x"));
      opts = BCON_NEW ("upsert", BCON_BOOL (true));
      r = mongoc_collection_update_one (users, filter, update, opts, &reply,
                                        &error);
      ok (!r && error.code == 11000, "upsert of a duplicate fails with 11000");
      bson_destroy (&reply);
      bson_destroy (opts);
      bson_destroy (filter);
      bson_destroy (update);

      batch[0] = m1;
      batch[1] = u2;
      batch[2] = m2;
      r = mongoc_collection_insert_many (users, batch, 3, NULL, &reply,
                                         &error);
      ok (!r && error.code == 11000 &&
             get_int (&reply, "insertedCount", -1) == 1 &&
             get_int (&reply, "writeErrors.0.index", -1) == 1,
          "ordered insert_many stops at the duplicate (index 1)");
      bson_destroy (&reply);

      cursor = mongoc_collection_find_indexes_with_opts (users, NULL);
      {
         bool id_ix = false, email_ix = false;

         while (mongoc_cursor_next (cursor, &cdoc)) {
            if (str_is (cdoc, "name", "_id_")) {
               id_ix = true;
            }
            if (str_is (cdoc, "name", "email_1") &&
                get_int (cdoc, "key.email", 0) == 1 &&
                has_field (cdoc, "unique")) {
               email_ix = true;
            }
         }
         ok (id_ix && email_ix && !mongoc_cursor_error (cursor, &error),
             "listIndexes shows _id_ and unique email_1");
      }
      mongoc_cursor_destroy (cursor);

      bson_destroy (cmd);
      bson_destroy (u1);
      bson_destroy (u2);
      bson_destroy (u3);
      bson_destroy (m1);
      bson_destroy (m2);
   }

   /* --- errors ------------------------------------------------------- */
   {
      bson_t *cmd = BCON_NEW ("xyzzy", BCON_INT32 (1));

      r = mongoc_client_command_simple (client, DB_NAME, cmd, NULL, &reply,
                                        &error);
      ok (!r && error.code == 59 &&
             strcmp (error.message, "no such command: 'xyzzy'") == 0 &&
             str_is (&reply, "codeName", "CommandNotFound"),
          "unknown command -> 59 CommandNotFound");
      bson_destroy (&reply);
      bson_destroy (cmd);
   }

   /* --- drops -------------------------------------------------------- */
   r = mongoc_collection_drop (users, &error);
   ok (r, "drop collection");
   r = mongoc_collection_drop (users, &error);
   ok (!r && error.code == 26, "drop of a missing collection: 26 ns not found");
   r = mongoc_database_drop (db, &error);
   filter = bson_new ();
   ok (r && count_find (items, filter, NULL) == 0, "dropDatabase empties it");
   bson_destroy (filter);

   mongoc_collection_destroy (users);
   mongoc_collection_destroy (items);
   mongoc_database_destroy (db);
   mongoc_client_pool_push (pool, client);
}

/* ---------------------------------------------------------------------- */
/* The failCommand fail point, as the module's libmongoc sees its effects. */

/* configureFailPoint on admin: the command's reply (the count) or -1 */
static int64_t
fail_point (mongoc_client_t *client, bson_t *cmd, bson_error_t *error)
{
   bson_t reply;
   int64_t count = -1;

   if (mongoc_client_command_simple (client, "admin", cmd, NULL, &reply,
                                     error)) {
      count = get_int (&reply, "count", -1);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
   return count;
}

static void
fail_point_off (mongoc_client_t *client)
{
   bson_error_t error;

   if (fail_point (client,
                   BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                             "mode", BCON_UTF8 ("off")),
                   &error) < 0) {
      diag_error ("fail point off", &error);
   }
}

/* $inc of n on one counter document of a collection */
static bool
inc (mongoc_collection_t *coll, bson_t *reply, bson_error_t *error)
{
   bson_t *q = BCON_NEW ("_id", BCON_UTF8 ("c"));
   bson_t *u = BCON_NEW ("$inc", "{", "n", BCON_INT32 (1), "}");
   bson_t *opts = BCON_NEW ("upsert", BCON_BOOL (true));
   bool r = mongoc_collection_update_one (coll, q, u, opts, reply, error);

   bson_destroy (opts);
   bson_destroy (u);
   bson_destroy (q);
   return r;
}

static int64_t
counter (mongoc_collection_t *coll)
{
   bson_t *q = BCON_NEW ("_id", BCON_UTF8 ("c"));
   bson_t *doc = find_one (coll, q);
   int64_t n = get_int (doc, "n", 0);

   if (doc) {
      bson_destroy (doc);
   }
   bson_destroy (q);
   return n;
}

static void
fail_points (mongoc_uri_t *uri, mongoc_client_t *client)
{
   mongoc_database_t *db = mongoc_client_get_database (client, FP_DB);
   mongoc_collection_t *counts = mongoc_database_get_collection (db, "counts");
   mongoc_collection_t *other = mongoc_database_get_collection (db, "other");
   mongoc_client_t *quick;
   mongoc_uri_t *quick_uri;
   bson_error_t error;
   bson_t reply, *doc, *empty = bson_new ();
   bool r, r2, r3;
   int64_t count, n;
   double t0, ms;
   int i, fails;

   mongoc_database_drop (db, NULL);

   /* the admin database only; a fail point of another name is none */
   doc = BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"), "mode",
                   BCON_UTF8 ("off"));
   r = mongoc_client_command_simple (client, FP_DB, doc, NULL, NULL, &error);
   bson_destroy (doc);
   ok (!r && error.domain == MONGOC_ERROR_SERVER && error.code == 13,
       "configureFailPoint outside admin: 13 Unauthorized (%u: %s)",
       error.code, error.message);
   count = fail_point (client,
                       BCON_NEW ("configureFailPoint", BCON_UTF8 ("noSuch"),
                                 "mode", BCON_UTF8 ("off")),
                       &error);
   ok (count < 0 && error.code == 266,
       "an unknown fail point: 266 FailPointSetFailed (%u: %s)", error.code,
       error.message);
   count = fail_point (client,
                       BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                                 "mode", BCON_UTF8 ("sometimes")),
                       &error);
   ok (count < 0 && error.code == 2, "an unknown mode: 2 BadValue (%u: %s)",
       error.code, error.message);

   /* {times: 1}, errorCode and errorLabels, on one namespace: the update is
    * not run, its error is the server's code, the labels in the reply */
   count = fail_point (
      client,
      BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"), "mode", "{",
                "times", BCON_INT32 (1), "}", "data", "{", "failCommands", "[",
                BCON_UTF8 ("update"), "]", "namespace",
                BCON_UTF8 (FP_DB ".counts"), "errorCode", BCON_INT32 (6),
                "errorLabels", "[", BCON_UTF8 ("TransientTransactionError"),
                "]", "}"),
      &error);
   ok (count >= 0, "times 1: set (count %" PRId64 ")", count);
   if (count < 0) {
      diag_error ("configureFailPoint", &error);
   }
   r = inc (other, NULL, &error);
   ok (r, "times 1: an update of another namespace passes");
   r = inc (counts, &reply, &error);
   ok (!r && error.domain == MONGOC_ERROR_SERVER && error.code == 6 &&
          strstr (error.message, FP_MSG) != NULL,
       "times 1: the update fails: domain SERVER, code 6, the fail point's "
       "message (%u %u: %s)",
       error.domain, error.code, error.message);
   ok (mongoc_error_has_label (&reply, "TransientTransactionError"),
       "times 1: the write's reply has the errorLabels");
   diag_doc ("times 1: update reply", &reply);
   bson_destroy (&reply);
   ok (counter (counts) == 0, "times 1: the failed update was not run");
   r = inc (counts, NULL, &error);
   ok (r && counter (counts) == 1, "times 1: the next update passes");
   count = fail_point (client,
                       BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                                 "mode", BCON_UTF8 ("off")),
                       &error);
   ok (count == 1, "off: the fail point fired once (count %" PRId64 ")", count);

   /* a command's own reply: mongod's error document */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "{", "times", BCON_INT32 (1), "}", "data",
                         "{", "failCommands", "[", BCON_UTF8 ("count"), "]",
                         "errorCode", BCON_INT32 (262), "}"),
               &error);
   doc = BCON_NEW ("count", BCON_UTF8 ("counts"));
   r = mongoc_database_command_simple (db, doc, NULL, &reply, &error);
   ok (!r && error.domain == MONGOC_ERROR_SERVER && error.code == 262 &&
          get_int (&reply, "ok", 1) == 0 && get_int (&reply, "code", 0) == 262 &&
          str_is (&reply, "codeName", "ExceededTimeLimit") &&
          str_is (&reply, "errmsg", FP_MSG) &&
          !has_field (&reply, "errorLabels"),
       "a failed command's reply: ok 0, code, codeName, errmsg");
   diag_doc ("count reply", &reply);
   bson_destroy (&reply);
   bson_destroy (doc);

   /* {times: 1, skip: 1}: the second update of the namespace fails, once */
   fail_point (
      client,
      BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"), "mode", "{",
                "times", BCON_INT32 (1), "skip", BCON_INT32 (1), "}", "data",
                "{", "failCommands", "[", BCON_UTF8 ("update"), "]",
                "namespace", BCON_UTF8 (FP_DB ".counts"), "errorCode",
                BCON_INT32 (11600), "}"),
      &error);
   r = inc (counts, NULL, &error);
   r2 = inc (counts, NULL, &error);
   n = error.code;
   r3 = inc (counts, NULL, &error);
   ok (r && !r2 && n == 11600 && r3 && counter (counts) == 3,
       "times 1 skip 1: the first update passes, the second fails, the third "
       "passes (counter %" PRId64 ")",
       counter (counts));

   /* {skip: 2}: two finds pass, every later one fails until off */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "{", "skip", BCON_INT32 (2), "}", "data", "{",
                         "failCommands", "[", BCON_UTF8 ("find"), "]",
                         "errorCode", BCON_INT32 (2), "}"),
               &error);
   for (fails = 0, i = 0; i < 5; i++) {
      fails += count_find (counts, empty, NULL) < 0;
   }
   fail_point_off (client);
   ok (fails == 3 && count_find (counts, empty, NULL) == 1,
       "skip 2: 2 finds of 5 pass, then all after off (%d failed)", fails);

   /* closeConnection: libmongoc sees the connection closed, no reply; the
    * next command has a new connection */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "{", "times", BCON_INT32 (1), "}", "data",
                         "{", "failCommands", "[", BCON_UTF8 ("insert"), "]",
                         "closeConnection", BCON_BOOL (true), "}"),
               &error);
   doc = BCON_NEW ("_id", BCON_UTF8 ("closed"));
   r = mongoc_collection_insert_one (other, doc, NULL, NULL, &error);
   ok (!r && error.domain == MONGOC_ERROR_STREAM &&
          error.code == MONGOC_ERROR_STREAM_SOCKET,
       "closeConnection: a network error, domain STREAM, code SOCKET "
       "(%u %u: %s)",
       error.domain, error.code, error.message);
   ok (count_find (other, doc, NULL) == 0,
       "closeConnection: the insert was not run");
   r = mongoc_collection_insert_one (other, doc, NULL, NULL, &error);
   ok (r, "closeConnection: the next insert passes on a new connection");
   bson_destroy (doc);

   /* blockConnection: the command waits blockTimeMS, then runs */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "{", "times", BCON_INT32 (1), "}", "data",
                         "{", "failCommands", "[", BCON_UTF8 ("update"), "]",
                         "blockConnection", BCON_BOOL (true), "blockTimeMS",
                         BCON_INT32 (400), "}"),
               &error);
   t0 = now_ms ();
   r = inc (counts, NULL, &error);
   ms = now_ms () - t0;
   ok (r && ms >= 390 && counter (counts) == 4,
       "blockConnection 400 ms: the update waited %.0f ms, then ran", ms);
   diag ("block_ms=%.0f", ms);

   /* blocked longer than the client's socketTimeoutMS: libmongoc times out
    * (a network error) and closes; with errorCode the command never runs */
   quick_uri = mongoc_uri_copy (uri);
   mongoc_uri_set_option_as_int32 (quick_uri, MONGOC_URI_SOCKETTIMEOUTMS, 300);
   quick = mongoc_client_new_from_uri (quick_uri);
   mongoc_client_set_error_api (quick, MONGOC_ERROR_API_VERSION_2);
   ok (ping (quick, &error), "a client with socketTimeoutMS 300 pings");
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "alwaysOn", "data", "{", "failCommands", "[",
                         BCON_UTF8 ("update"), "]", "blockConnection",
                         BCON_BOOL (true), "blockTimeMS", BCON_INT32 (1000),
                         "errorCode", BCON_INT32 (91), "}"),
               &error);
   {
      mongoc_collection_t *qc =
         mongoc_client_get_collection (quick, FP_DB, "counts");
      t0 = now_ms ();
      r = inc (qc, NULL, &error);
      ms = now_ms () - t0;
      ok (!r && error.domain == MONGOC_ERROR_STREAM &&
             error.code == MONGOC_ERROR_STREAM_SOCKET && ms < 900,
          "blockConnection 1000 ms, socketTimeoutMS 300: a network error "
          "after %.0f ms (%u %u: %s)",
          ms, error.domain, error.code, error.message);
      t0 = now_ms ();
      r = inc (counts, NULL, &error);
      ms = now_ms () - t0;
      ok (!r && error.domain == MONGOC_ERROR_SERVER && error.code == 91 &&
             ms >= 990,
          "blockConnection 1000 ms and errorCode 91: the error after %.0f ms",
          ms);
      mongoc_collection_destroy (qc);
   }
   fail_point_off (client);
   usleep (1100 * 1000); /* the timed-out update's block ends, and it fails */
   ok (counter (counts) == 4, "blocked updates with errorCode never ran");
   ok (ping (quick, &error), "the timed-out client pings again");
   mongoc_client_destroy (quick);
   mongoc_uri_destroy (quick_uri);

   /* writeConcernError alone: a write runs, and libmongoc reports the
    * write concern error */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "{", "times", BCON_INT32 (1), "}", "data",
                         "{", "failCommands", "[", BCON_UTF8 ("update"), "]",
                         "writeConcernError", "{", "code", BCON_INT32 (64),
                         "errmsg", BCON_UTF8 ("waiting for replication timed "
                                              "out"),
                         "}", "}"),
               &error);
   r = inc (counts, NULL, &error);
   ok (!r && error.domain == MONGOC_ERROR_WRITE_CONCERN && error.code == 64 &&
          counter (counts) == 5,
       "writeConcernError: the update ran, libmongoc reports a write concern "
       "error (%u %u: %s)",
       error.domain, error.code, error.message);

   /* appName: only the connections whose handshake gave that name */
   {
      mongoc_uri_t *app_uri = mongoc_uri_copy (uri);
      mongoc_client_t *app;

      mongoc_uri_set_appname (app_uri, "fp-app");
      app = mongoc_client_new_from_uri (app_uri);
      mongoc_client_set_error_api (app, MONGOC_ERROR_API_VERSION_2);
      fail_point (client,
                  BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                            "mode", "alwaysOn", "data", "{", "failCommands",
                            "[", BCON_UTF8 ("ping"), "]", "appName",
                            BCON_UTF8 ("fp-app"), "errorCode", BCON_INT32 (2),
                            "}"),
                  &error);
      r = ping (app, &error);
      n = error.code;
      r2 = ping (client, &error);
      fail_point_off (client);
      ok (!r && n == 2 && r2,
          "appName: the named client's ping fails, another's passes");
      mongoc_client_destroy (app);
      mongoc_uri_destroy (app_uri);
   }

   /* off: nothing fails any more */
   fail_point (client,
               BCON_NEW ("configureFailPoint", BCON_UTF8 ("failCommand"),
                         "mode", "alwaysOn", "data", "{", "failCommands", "[",
                         BCON_UTF8 ("find"), BCON_UTF8 ("update"), "]",
                         "errorCode", BCON_INT32 (2), "}"),
               &error);
   r = inc (counts, NULL, &error);
   fail_point_off (client);
   r2 = inc (counts, NULL, &error);
   ok (!r && r2 && count_find (counts, empty, NULL) == 1 &&
          counter (counts) == 6,
       "alwaysOn, then off: failed, then passes");

   bson_destroy (empty);
   mongoc_database_drop (db, NULL);
   mongoc_collection_destroy (other);
   mongoc_collection_destroy (counts);
   mongoc_database_destroy (db);
}

/* ---------------------------------------------------------------------- */

static void
persist_write (mongoc_client_t *client)
{
   mongoc_database_t *db = mongoc_client_get_database (client, PERSIST_DB);
   mongoc_collection_t *coll = mongoc_database_get_collection (db, "things");
   bson_error_t error;
   bson_oid_t oid;
   bson_t *doc, *cmd;
   mongoc_collection_t *empty;
   bool r;

   mongoc_database_drop (db, NULL);
   bson_oid_init_from_string (&oid, "5f0c1a2b3c4d5e6f70819203");
   doc = BCON_NEW ("_id", BCON_UTF8 ("p1"), "v", BCON_INT32 (42), "big",
                   BCON_INT64 (5000000000LL), "small64", BCON_INT64 (7),
                   "ref", BCON_OID (&oid), "when",
                   BCON_DATE_TIME (1600000000123LL), "tags", "[",
                   BCON_UTF8 ("x"), BCON_UTF8 ("y"), "]");
   r = mongoc_collection_insert_one (coll, doc, NULL, NULL, &error);
   ok (r, "persist-write: insert");
   cmd = BCON_NEW ("createIndexes", BCON_UTF8 ("things"), "indexes", "[", "{",
                   "key", "{", "v", BCON_INT32 (1), "}", "name",
                   BCON_UTF8 ("v_1"), "unique", BCON_BOOL (true), "}", "]");
   r = mongoc_collection_write_command_with_opts (coll, cmd, NULL, NULL,
                                                  &error);
   ok (r, "persist-write: unique index");
   empty = mongoc_database_create_collection (db, "empty", NULL, &error);
   ok (empty != NULL, "persist-write: create empty collection");
   if (empty) {
      mongoc_collection_destroy (empty);
   }
   bson_destroy (cmd);
   bson_destroy (doc);
   mongoc_collection_destroy (coll);
   mongoc_database_destroy (db);
}

static void
persist_read (mongoc_client_t *client)
{
   mongoc_database_t *db = mongoc_client_get_database (client, PERSIST_DB);
   mongoc_collection_t *coll = mongoc_database_get_collection (db, "things");
   bson_error_t error;
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 ("p1"));
   bson_t *doc = find_one (coll, filter);
   bson_t *dup = BCON_NEW ("v", BCON_INT32 (42));
   char **names;
   bool r, found = false;
   int i;

   ok (doc && get_int (doc, "v", 0) == 42 &&
          get_int (doc, "big", 0) == 5000000000LL &&
          field_type (doc, "small64") == BSON_TYPE_INT64 &&
          field_type (doc, "ref") == BSON_TYPE_OID &&
          field_type (doc, "when") == BSON_TYPE_DATE_TIME,
       "persist-read: document survived with its types");
   if (doc) {
      diag_doc ("persisted", doc);
      bson_destroy (doc);
   }
   r = mongoc_collection_insert_one (coll, dup, NULL, NULL, &error);
   ok (!r && error.code == 11000, "persist-read: unique index survived");
   names = mongoc_database_get_collection_names_with_opts (db, NULL, &error);
   for (i = 0; names && names[i]; i++) {
      if (strcmp (names[i], "empty") == 0) {
         found = true;
      }
   }
   bson_strfreev (names);
   ok (found, "persist-read: empty collection survived");
   bson_destroy (dup);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
   mongoc_database_destroy (db);
}

static void
latency (mongoc_uri_t *uri, mongoc_client_pool_t *pool)
{
   mongoc_client_t *client = mongoc_client_new_from_uri (uri);
   struct thread_arg args[N_THREADS];
   bson_error_t error;
   double t0, ms;
   int i, good = 0;
   bool r;

   mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
   t0 = now_ms ();
   r = ping (client, &error); /* includes connect + handshake */
   ms = now_ms () - t0;
   ok (r, "ping (with connection setup)");
   diag ("ping_ms=%.0f", ms);
   t0 = now_ms ();
   r = ping (client, &error);
   ms = now_ms () - t0;
   ok (r, "second ping");
   diag ("ping2_ms=%.0f", ms);
   mongoc_client_destroy (client);

   run_threads (pool, 1, args); /* warm up: one connection per thread */
   ms = run_threads (pool, 1, args);
   for (i = 0; i < N_THREADS; i++) {
      good += args[i].good;
   }
   ok (good == N_THREADS, "%d concurrent pings", N_THREADS);
   diag ("parallel_ms=%.0f", ms);
}

int
main (int argc, char **argv)
{
   const char *mode = argc > 2 ? argv[2] : "all";
   mongoc_uri_t *uri;
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;
   bson_error_t error;

   if (argc < 2) {
      fprintf (stderr,
               "usage: %s URI [all|persist-write|persist-read|latency|failpoint]\n",
               argv[0]);
      return 2;
   }
   mongoc_init ();
   uri = mongoc_uri_new_with_error (argv[1], &error);
   if (!uri) {
      fprintf (stderr, "bad URI: %s\n", error.message);
      return 2;
   }
   pool = mongoc_client_pool_new (uri);
   mongoc_client_pool_set_error_api (pool, MONGOC_ERROR_API_VERSION_2);
   mongoc_client_pool_set_appname (pool, "mongo-check");

   if (strcmp (mode, "all") == 0) {
      check_all (pool);
   } else if (strcmp (mode, "persist-write") == 0 ||
              strcmp (mode, "persist-read") == 0) {
      client = mongoc_client_pool_pop (pool);
      if (mode[8] == 'w') {
         persist_write (client);
      } else {
         persist_read (client);
      }
      mongoc_client_pool_push (pool, client);
   } else if (strcmp (mode, "latency") == 0) {
      latency (uri, pool);
   } else if (strcmp (mode, "failpoint") == 0) {
      client = mongoc_client_pool_pop (pool);
      fail_points (uri, client);
      fail_point_off (client);
      mongoc_client_pool_push (pool, client);
   } else {
      fprintf (stderr, "unknown mode %s\n", mode);
      return 2;
   }

   printf ("1..%d\n", test_num);
   mongoc_client_pool_destroy (pool);
   mongoc_uri_destroy (uri);
   mongoc_cleanup ();
   return failures ? 1 : 0;
}
