/* The JNI side of the native parser core: io.dspark.vllm.parse.NativeCore's native methods.
 *
 * A shim of a few functions and no parsing: it loads the core (dspark_core.h's C ABI, the build for this CPU
 * that the Java side chose) with dlopen, calls dspark_parse on a batch of bodies, hands the result
 * (Arrow C data interface structs) to Java as one byte[] (a copy) and releases it. Nothing here keeps state
 * but the core's entry point.
 */
#include <dlfcn.h>
#include <jni.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dspark_core.h"

typedef int32_t (*abi_fn)(void);
typedef int32_t (*parse_fn)(const char*, size_t, const uint8_t*, size_t, const int64_t*, int64_t, struct ArrowArray*,
                            struct ArrowSchema*, char*, size_t);

static parse_fn core_parse = NULL;

/* The array and its schema, one allocation; the handle Java holds is its address. */
struct Result {
  struct ArrowArray array;
  struct ArrowSchema schema;
};

/* Loads the core at `path`: null when done, else why not. */
JNIEXPORT jstring JNICALL Java_io_dspark_vllm_parse_NativeCore_load(JNIEnv* env, jclass cls, jstring path) {
  (void)cls;
  const char* file = (*env)->GetStringUTFChars(env, path, NULL);
  if (file == NULL) return NULL; /* OutOfMemoryError pending */
  void* library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  (*env)->ReleaseStringUTFChars(env, path, file);
  if (library == NULL) return (*env)->NewStringUTF(env, dlerror());
  abi_fn abi = (abi_fn)dlsym(library, "dspark_abi_version");
  parse_fn parse = (parse_fn)dlsym(library, "dspark_parse");
  if (abi == NULL || parse == NULL) return (*env)->NewStringUTF(env, "not the dspark-vllm native core");
  if (abi() != DSPARK_ABI_VERSION) {
    char message[128];
    snprintf(message, sizeof message, "the native core has ABI %d, this jar needs %d", abi(), DSPARK_ABI_VERSION);
    return (*env)->NewStringUTF(env, message);
  }
  core_parse = parse;
  return NULL;
}

/* dspark_parse over the bodies bodies[from..to) (byte[]s, null read as empty), copied into one native buffer
 * (malloc: not the JVM's direct memory, which a TaskManager keeps small). Returns the handle of the result
 * (> 0), or minus the core's code with its message in `error`. */
JNIEXPORT jlong JNICALL Java_io_dspark_vllm_parse_NativeCore_parse(JNIEnv* env, jclass cls, jbyteArray plan,
                                                                   jobjectArray bodies, jint from, jint to,
                                                                   jbyteArray error) {
  (void)cls;
  if (core_parse == NULL) return -DSPARK_INTERNAL;
  int64_t n = to - from, total = 0;
  for (jint i = from; i < to; i++) {
    jbyteArray body = (jbyteArray)(*env)->GetObjectArrayElement(env, bodies, i);
    if (body != NULL) {
      total += (*env)->GetArrayLength(env, body);
      (*env)->DeleteLocalRef(env, body);
    }
  }
  uint8_t* data = malloc((size_t)total + 1);
  int64_t* offsets = malloc(sizeof(int64_t) * (size_t)(n + 1));
  struct Result* result = calloc(1, sizeof *result);
  jbyte* plan_bytes = (*env)->GetByteArrayElements(env, plan, NULL);
  char message[512] = {0};
  int32_t code = DSPARK_INTERNAL;
  if (data != NULL && offsets != NULL && result != NULL && plan_bytes != NULL) {
    int64_t at = 0;
    offsets[0] = 0;
    for (jint i = from; i < to; i++) {
      jbyteArray body = (jbyteArray)(*env)->GetObjectArrayElement(env, bodies, i);
      if (body != NULL) {
        jsize length = (*env)->GetArrayLength(env, body);
        (*env)->GetByteArrayRegion(env, body, 0, length, (jbyte*)data + at);
        at += length;
        (*env)->DeleteLocalRef(env, body);
      }
      offsets[i - from + 1] = at;
    }
    code = core_parse((const char*)plan_bytes, (size_t)(*env)->GetArrayLength(env, plan), data, (size_t)total,
                      offsets, n, &result->array, &result->schema, message, sizeof message);
  } else {
    snprintf(message, sizeof message, "out of memory for %lld bytes of bodies", (long long)total);
  }
  if (plan_bytes != NULL) (*env)->ReleaseByteArrayElements(env, plan, plan_bytes, JNI_ABORT);
  free(data);
  free(offsets);
  if (code != DSPARK_DONE) {
    free(result);
    jsize room = (*env)->GetArrayLength(env, error);
    const char* end = memchr(message, 0, sizeof message);
    jsize length = end ? (jsize)(end - message) : (jsize)sizeof message;
    if (length > room) length = room;
    (*env)->SetByteArrayRegion(env, error, 0, length, (const jbyte*)message);
    return -(jlong)code;
  }
  return (jlong)(intptr_t)result;
}

/* -- the result as one Java byte[] ----------------------------------------------------------------------------
 * Its layout is declared in native/contract.py (DSPARK_RESULT_*, DSPARK_ARRAY_HEADER_* in dspark_contract.h;
 * ArrowColumn.java reads it with CoreContract's twins). Each writer returns the position after what it wrote;
 * with `out` NULL it only counts. */

static int64_t put(uint8_t* out, int64_t at, const void* bytes, int64_t n) {
  if (out != NULL && n > 0) memcpy(out + at, bytes, (size_t)n);
  return at + n;
}

static int64_t put32(uint8_t* out, int64_t at, int32_t value) { return put(out, at, &value, 4); }

static int64_t put64(uint8_t* out, int64_t at, int64_t value) { return put(out, at, &value, 8); }

static char type_of(const struct ArrowSchema* schema) {
  const char* f = schema->format;
  if (f[0] == 't' && f[1] == 's') return DSPARK_RESULT_INT64; /* timestamp[ms, UTC]: int64 */
  if (f[0] == '+' && f[1] == 'l') return DSPARK_RESULT_LIST;
  return f[0];
}

static int64_t put_array(uint8_t* out, int64_t at, const struct ArrowArray* a, const struct ArrowSchema* s) {
  char type = type_of(s);
  int64_t end = a->offset + a->length;
  int64_t validity = a->null_count != 0 && a->buffers[0] != NULL ? (end + 7) / 8 : 0;
  put(out, at + DSPARK_ARRAY_HEADER_TYPE_AT, &type, 1);
  put64(out, at + DSPARK_ARRAY_HEADER_LENGTH_AT, a->length);
  put64(out, at + DSPARK_ARRAY_HEADER_OFFSET_AT, a->offset);
  put32(out, at + DSPARK_ARRAY_HEADER_VALIDITY_BYTES_AT, (int32_t)validity);
  at = put(out, at + DSPARK_ARRAY_HEADER_BYTES, a->buffers[0], validity);
  switch (type) {
    case DSPARK_RESULT_UTF8: {
      const int32_t* offsets = (const int32_t*)a->buffers[1];
      at = put(out, at, offsets, 4 * (end + 1));
      at = put64(out, at, offsets[end]);
      return put(out, at, a->buffers[2], offsets[end]);
    }
    case DSPARK_RESULT_INT64:
    case DSPARK_RESULT_FLOAT64:
      return put(out, at, a->buffers[1], 8 * end);
    case DSPARK_RESULT_BOOL:
      return put(out, at, a->buffers[1], (end + 7) / 8);
    case DSPARK_RESULT_INT8:
      return put(out, at, a->buffers[1], end);
    case DSPARK_RESULT_LIST:
      at = put(out, at, a->buffers[1], 4 * (end + 1));
      return put_array(out, at, a->children[0], s->children[0]);
    default:
      return -1; /* a type the core does not make */
  }
}

static int64_t put_result(uint8_t* out, const struct Result* r) {
  int64_t at = put32(out, 0, (int32_t)r->array.n_children);
  for (int64_t i = 0; i < r->array.n_children; i++) {
    const char* name = r->schema.children[i]->name;
    int32_t length = (int32_t)strlen(name);
    at = put32(out, at, length);
    at = put(out, at, name, length);
    at = put_array(out, at, r->array.children[i], r->schema.children[i]);
    if (at < 0) return -1;
  }
  return at;
}

/* The columns of a result as one byte[] (the layout above); null, with an exception pending, if it cannot. */
JNIEXPORT jbyteArray JNICALL Java_io_dspark_vllm_parse_NativeCore_columns(JNIEnv* env, jclass cls, jlong handle) {
  (void)cls;
  const struct Result* result = (const struct Result*)(intptr_t)handle;
  int64_t size = put_result(NULL, result);
  if (size < 0 || size > 0x7fffffef) {
    jclass error = (*env)->FindClass(env, "java/lang/IllegalStateException");
    if (error != NULL) (*env)->ThrowNew(env, error, "the native core's columns cannot be handed to Java");
    return NULL;
  }
  jbyteArray bytes = (*env)->NewByteArray(env, (jsize)size);
  if (bytes == NULL) return NULL; /* OutOfMemoryError pending */
  uint8_t* out = (*env)->GetPrimitiveArrayCritical(env, bytes, NULL);
  if (out == NULL) return NULL;
  put_result(out, result);
  (*env)->ReleasePrimitiveArrayCritical(env, bytes, out, 0);
  return bytes;
}

/* Frees a result: the core's release callbacks, then the structs. */
JNIEXPORT void JNICALL Java_io_dspark_vllm_parse_NativeCore_release(JNIEnv* env, jclass cls, jlong handle) {
  (void)env, (void)cls;
  struct Result* result = (struct Result*)(intptr_t)handle;
  if (result == NULL) return;
  if (result->array.release) result->array.release(&result->array);
  if (result->schema.release) result->schema.release(&result->schema);
  free(result);
}
