// libFuzzer target over the core's one C ABI entry point (native/dspark_core.h), built with ASan and UBSan
// by native/fuzz/run.sh. The first byte picks a plan (native/fuzz/plans.py: the project's profiles); the rest
// is cut into bodies at each 0x1E byte, copied into one heap buffer of exactly their size, so that a read
// beyond the last body (or a body) is caught. The exported arrays are checked for their shape and released:
// LeakSanitizer reports whatever they did not free. With "explain" (every plan but the last four), every
// body is a row or has a reason (UTF-8 text), except one refused by its size, and no content is left deferred.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "dspark_core.h"
#include "plans.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_parse: %s\n", what);
    std::abort();
  }
}

void check_child(const ArrowSchema* schema, const ArrowArray* array, int64_t n) {
  check(array->length == n, "a column's length is not the batch's");
  check(array->offset == 0 && array->null_count >= 0 && array->null_count <= n, "bad offset or null count");
  const char* f = schema->format;
  if (std::strcmp(f, "u") == 0 || std::strcmp(f, "+l") == 0) {
    const int32_t* offsets = static_cast<const int32_t*>(array->buffers[1]);
    check(offsets[0] == 0, "offsets start at 0");
    for (int64_t i = 0; i < n; ++i) check(offsets[i + 1] >= offsets[i], "offsets decrease");
    if (f[0] == '+') check_child(schema->children[0], array->children[0], offsets[n]);
  } else if (std::strcmp(schema->name, "verdict") == 0) {
    const int8_t* v = static_cast<const int8_t*>(array->buffers[1]);
    for (int64_t i = 0; i < n; ++i) check(v[i] >= DSPARK_OK && v[i] <= DSPARK_UNSUPPORTED, "unknown verdict");
  } else if (std::strcmp(schema->name, "content_verdict") == 0) {
    const int8_t* v = static_cast<const int8_t*>(array->buffers[1]);
    for (int64_t i = 0; i < n; ++i)
      check(v[i] >= DSPARK_CONTENT_JSON && v[i] <= DSPARK_CONTENT_DEFERRED, "unknown content verdict");
  }
}

bool valid(const ArrowArray* array, int64_t i) {
  const uint8_t* bits = static_cast<const uint8_t*>(array->buffers[0]);
  return !bits || (bits[i >> 3] >> (i & 7)) & 1;
}

bool utf8(const uint8_t* s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint8_t c = s[i];
    size_t len = c < 0x80                   ? 1
                 : (c >= 0xC2 && c <= 0xDF) ? 2
                 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4
                                            : 0;
    if (!len || i + len > n) return false;
    for (size_t k = 1; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return false;
    if (len == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F))) return false;
    if (len == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))) return false;
    i += len;
  }
  return true;
}

const ArrowArray* field(const ArrowSchema* schema, const ArrowArray* array, const char* name) {
  for (int64_t c = 0; c < schema->n_children; ++c)
    if (std::strcmp(schema->children[c]->name, name) == 0) return array->children[c];
  return nullptr;
}

// The explained columns: a reason for every body that is not a row (for one refused by its size, that it is
// too large), none for a row; reasons, fields and content errors are UTF-8; no content is deferred.
void check_explained(const ArrowSchema* schema, const ArrowArray* array, int64_t n) {
  const ArrowArray* verdict = field(schema, array, "verdict");
  const ArrowArray* reason = field(schema, array, "reason");
  if (!reason) return;
  const int8_t* v = static_cast<const int8_t*>(verdict->buffers[1]);
  const int32_t* reason_offsets = static_cast<const int32_t*>(reason->buffers[1]);
  const char* reason_chars = static_cast<const char*>(reason->buffers[2]);
  for (int64_t i = 0; i < n; ++i) {
    check(valid(reason, i) == (v[i] != DSPARK_OK), "a reason for each error, none for a row");
    std::string_view text(reason_chars + reason_offsets[i], static_cast<size_t>(reason_offsets[i + 1] - reason_offsets[i]));
    check((v[i] == DSPARK_TOO_LARGE) == (text.rfind("body too large: over ", 0) == 0),
          "a body refused by its size, and only that, is too large");
  }
  for (const char* name : {"reason", "field", "content_error"}) {
    const ArrowArray* text = field(schema, array, name);
    if (!text) continue;
    const int32_t* offsets = static_cast<const int32_t*>(text->buffers[1]);
    const uint8_t* chars = static_cast<const uint8_t*>(text->buffers[2]);
    for (int64_t i = 0; i < n; ++i)
      if (valid(text, i))
        check(utf8(chars + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i])), "a reason that is not UTF-8");
  }
  const ArrowArray* content_verdict = field(schema, array, "content_verdict");
  if (!content_verdict) return;
  const int8_t* cv = static_cast<const int8_t*>(content_verdict->buffers[1]);
  for (int64_t i = 0; i < n; ++i) check(cv[i] != DSPARK_CONTENT_DEFERRED, "a content left deferred with explain");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const char* plan = kPlans[data[0] % (sizeof kPlans / sizeof kPlans[0])];
  data += 1;
  size -= 1;
  std::vector<int64_t> offsets{0};
  size_t total = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0x1E)
      offsets.push_back(static_cast<int64_t>(total));
    else
      ++total;
  }
  offsets.push_back(static_cast<int64_t>(total));
  std::unique_ptr<uint8_t[]> bodies(new uint8_t[total ? total : 1]);
  size_t at = 0;
  for (size_t i = 0; i < size; ++i)
    if (data[i] != 0x1E) bodies[at++] = data[i];
  int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  ArrowArray array;
  ArrowSchema schema;
  char error[256];
  int32_t code = dspark_parse(plan, std::strlen(plan), bodies.get(), total, offsets.data(), n, &array, &schema, error,
                              sizeof error);
  check(code == DSPARK_DONE, error);
  check(array.length == n && array.n_children == schema.n_children, "the struct's shape");
  for (int64_t c = 0; c < array.n_children; ++c) check_child(schema.children[c], array.children[c], n);
  check_explained(&schema, &array, n);
  array.release(&array);
  schema.release(&schema);
  return 0;
}
