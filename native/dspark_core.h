/* dspark-vllm's native parser core: response bodies -> typed Arrow columns, one pass per body.
 *
 * One entry point, a C ABI callable from any language (Python through ctypes, Java through JNI). The
 * caller describes what to read with a plan, a JSON document (see native/README.md for its fields;
 * connector/parse/native.py writes it from a Profile), and gives the bodies as one buffer plus n + 1
 * offsets. The core fills one Arrow struct array (Arrow C data interface) with the plan's columns, the
 * content properties' columns, and a per-body verdict. With the plan's "explain" (what every caller of the
 * project passes) the core decides every body as tests/oracle/exact.py would, byte for byte: a row
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

/* The versions, return codes, verdicts and plan kinds: declared once in native/contract.py. */
#include "dspark_contract.h"

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
