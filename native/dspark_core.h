/* dspark-vllm's native parser core: response bodies -> typed Arrow columns, one pass per body.
 *
 * One entry point, a C ABI callable from any language (Python through ctypes, Java through JNI). The
 * caller describes what to read with a plan, a JSON document (see native/README.md for its fields;
 * connector/decode/native.py writes it from a Profile), and gives the bodies as one buffer plus n + 1
 * offsets. The core fills one Arrow struct array (Arrow C data interface) with the plan's columns, the
 * content properties' columns, and a per-body verdict. With the plan's "explain" (what every caller of the
 * project passes) the core decides every body as connector/decode/exact.py would, byte for byte: a row
 * (DSPARK_OK), or an error with its category (the verdict), `reason` and `field`, and every content's values
 * and `content_error`; a fast pass reads the bodies it can, a slow path (dspark_exact.cpp) the rest. Only a
 * body over max_body_bytes is left unread (DSPARK_TOO_LARGE; with "explain" its reason is "body too large: over
 * <max_body_bytes> bytes", as the exact path says it). Without "explain", a body the fast
 * pass leaves gets only a verdict, and nulls. The core owns no memory after the call: the exported arrays
 * own theirs and free it in their release callbacks.
 */
#ifndef DSPARK_CORE_H
#define DSPARK_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this ABI (the function below, the verdict codes and the columns of the result); the plan
 * has its own version (2: "explain"; a plan of version 1 is refused). */
#define DSPARK_ABI_VERSION 2
#define DSPARK_PLAN_VERSION 2

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4
struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};
#endif

/* A body's verdict (column "verdict", int8). With "explain", the category of the body's error (its reason is
 * in column "reason"); without it, why the fast pass left the body to the caller's exact path. */
enum {
  DSPARK_OK = 0,
  DSPARK_NOT_JSON = 1,        /* the grammar, UTF-8, escapes, literals, numbers, trailing data, empty */
  DSPARK_NOT_OBJECT = 2,      /* one JSON value, but not an object */
  DSPARK_TOO_DEEP = 3,        /* more than 64 levels of arrays and objects */
  DSPARK_BYTE_ORDER_MARK = 4, /* starts with U+FEFF */
  DSPARK_WRONG_TYPE = 5,      /* a value on a column's path is not of the column's type */
  DSPARK_ERROR_RESPONSE = 6,  /* `error` not null, or `"object": "error"` */
  DSPARK_OUT_OF_RANGE = 7,    /* an integer beyond 64 bits, a timestamp outside years 1..9999 */
  DSPARK_REPEATED_NAME = 8,   /* without explain: a name the plan reads appears twice in one object */
  DSPARK_TOO_LARGE = 9,       /* longer than the plan's max_body_bytes: refused by size, never read */
  DSPARK_UNSUPPORTED = 10     /* without explain: a form the fast pass leaves (e.g. `5.0` as an int) */
};

/* A content's verdict (column "content_verdict", int8), for bodies that are DSPARK_OK. */
enum {
  DSPARK_CONTENT_JSON = 0,      /* starts like JSON: read into the content columns (and content_error) */
  DSPARK_CONTENT_NULL = 1,      /* no content (also a body that is not a row): every column null, no error */
  DSPARK_CONTENT_TEXT = 2,      /* does not start like JSON (after one optional ```json fence): free text, for
                                   the caller's x-extract patterns; content_error is what the reference says
                                   of it when no pattern reads it */
  DSPARK_CONTENT_DEFERRED = 3   /* without explain: starts like JSON, left to the reference */
};

/* Return codes of dspark_parse. On anything but DSPARK_DONE, `out` and `out_schema` are left untouched
 * and `error` holds a message. */
enum {
  DSPARK_DONE = 0,
  DSPARK_BAD_PLAN = 1,
  DSPARK_BAD_INPUT = 2,      /* offsets not increasing or beyond data_len */
  DSPARK_OUTPUT_TOO_LARGE = 3, /* a string column over 2^31 - 1 bytes: give fewer bodies at a time */
  DSPARK_INTERNAL = 4        /* out of memory, or a defect */
};

#if defined(__GNUC__)
#define DSPARK_API __attribute__((visibility("default")))
#else
#define DSPARK_API
#endif

DSPARK_API int32_t dspark_abi_version(void);

/* Parse n bodies: body i is data[offsets[i] .. offsets[i + 1]). The bytes in data beyond a body may be
 * read (never written) up to data_len; no byte before data or at or beyond data + data_len is read. */
DSPARK_API int32_t dspark_parse(const char* plan, size_t plan_len, const uint8_t* data, size_t data_len,
                     const int64_t* offsets, int64_t n, struct ArrowArray* out, struct ArrowSchema* out_schema,
                     char* error, size_t error_len);

#ifdef __cplusplus
}
#endif

#endif
