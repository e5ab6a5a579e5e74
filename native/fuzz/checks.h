// Checks shared by the fuzz targets (fuzz_parse.cpp, fuzz_plan.cpp): the exported arrays' shape, the verdicts'
// ranges, and with "explain" a reason for every body that is not a row, in UTF-8. A failed check aborts.
#ifndef DSPARK_FUZZ_CHECKS_H
#define DSPARK_FUZZ_CHECKS_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "dspark_core.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz check failed: %s\n", what);
    std::abort();
  }
}

// The core's own columns follow the plan's columns and properties (dspark_core.h): verdict, with "explain"
// reason and field, with content content_verdict, with both content_error. The last child is always one of
// them, so its name says which are there (a plan's column may be named "verdict" or "reason" too).
struct Own {
  int64_t verdict = -1, reason = -1, field = -1, content_verdict = -1, content_error = -1;
};

Own own_columns(const ArrowSchema* schema) {
  Own own;
  int64_t k = schema->n_children;
  std::string_view last = k ? schema->children[k - 1]->name : "";
  if (last == "content_error") {
    own = {k - 5, k - 4, k - 3, k - 2, k - 1};
  } else if (last == "content_verdict") {
    own.verdict = k - 2;
    own.content_verdict = k - 1;
  } else if (last == "field") {
    own.verdict = k - 3;
    own.reason = k - 2;
    own.field = k - 1;
  } else {
    own.verdict = k - 1;
  }
  check(own.verdict >= 0 && std::string_view(schema->children[own.verdict]->name) == "verdict",
        "the core's own columns are not where dspark_core.h puts them");
  return own;
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
  }
}

void check_verdicts(const ArrowArray* array, int64_t n, int lowest, int highest, const char* what) {
  const int8_t* v = static_cast<const int8_t*>(array->buffers[1]);
  for (int64_t i = 0; i < n; ++i) check(v[i] >= lowest && v[i] <= highest, what);
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

// The explained columns: a reason for every body that is not a row (for one refused by its size, that it is
// too large), none for a row; reasons, fields and content errors are UTF-8; no content is deferred.
void check_explained(const ArrowSchema* schema, const ArrowArray* array, int64_t n) {
  Own own = own_columns(schema);
  const ArrowArray* verdict = array->children[own.verdict];
  check_verdicts(verdict, n, DSPARK_OK, DSPARK_UNSUPPORTED, "unknown verdict");
  if (own.content_verdict >= 0)
    check_verdicts(array->children[own.content_verdict], n, DSPARK_CONTENT_JSON, DSPARK_CONTENT_DEFERRED,
                   "unknown content verdict");
  if (own.reason < 0) return;
  const ArrowArray* reason = array->children[own.reason];
  const int8_t* v = static_cast<const int8_t*>(verdict->buffers[1]);
  const int32_t* reason_offsets = static_cast<const int32_t*>(reason->buffers[1]);
  const char* reason_chars = static_cast<const char*>(reason->buffers[2]);
  for (int64_t i = 0; i < n; ++i) {
    check(valid(reason, i) == (v[i] != DSPARK_OK), "a reason for each error, none for a row");
    std::string_view text(reason_chars + reason_offsets[i], static_cast<size_t>(reason_offsets[i + 1] - reason_offsets[i]));
    check((v[i] == DSPARK_TOO_LARGE) == (text.rfind("body too large: over ", 0) == 0),
          "a body refused by its size, and only that, is too large");
  }
  for (int64_t c : {own.reason, own.field, own.content_error}) {
    if (c < 0) continue;
    const ArrowArray* text = array->children[c];
    const int32_t* offsets = static_cast<const int32_t*>(text->buffers[1]);
    const uint8_t* chars = static_cast<const uint8_t*>(text->buffers[2]);
    for (int64_t i = 0; i < n; ++i)
      if (valid(text, i))
        check(utf8(chars + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i])), "a reason that is not UTF-8");
  }
  if (own.content_verdict < 0) return;
  const int8_t* cv = static_cast<const int8_t*>(array->children[own.content_verdict]->buffers[1]);
  for (int64_t i = 0; i < n; ++i) check(cv[i] != DSPARK_CONTENT_DEFERRED, "a content left deferred with explain");
}

}  // namespace

namespace {

// Bodies from fuzzer bytes: cut at each 0x1E byte, copied into one heap buffer of exactly their size (so
// that a read beyond the last body, or a body, is caught).
struct Bodies {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
  std::vector<int64_t> offsets{0};
};

Bodies cut(const uint8_t* in, size_t n) {
  Bodies b;
  for (size_t i = 0; i < n; ++i) {
    if (in[i] == 0x1E)
      b.offsets.push_back(static_cast<int64_t>(b.size));
    else
      ++b.size;
  }
  b.offsets.push_back(static_cast<int64_t>(b.size));
  b.data.reset(new uint8_t[b.size ? b.size : 1]);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i)
    if (in[i] != 0x1E) b.data[at++] = in[i];
  return b;
}

// One call of the core over bodies [first, last) of `b`, checked; a batch whose columns outgrow the plan's
// max_column_bytes is read in halves, as the callers do (connector/parse/native.py, NativeParser.java), and
// only a single body may be refused so. Returns the code of the whole call (DSPARK_BAD_PLAN is passed on).
int32_t parse_checked(const char* plan, size_t plan_len, const Bodies& b, size_t first, size_t last) {
  int64_t n = static_cast<int64_t>(last - first);
  ArrowArray array;
  ArrowSchema schema;
  char error[256];
  error[0] = '\0';
  int32_t code = dspark_parse(plan, plan_len, b.data.get(), b.size, b.offsets.data() + first, n, &array, &schema,
                              error, sizeof error);
  if (code == DSPARK_OUTPUT_TOO_LARGE) {
    check(error[0] != '\0', "a refusal without a message");
    if (n > 1) {
      size_t half = first + static_cast<size_t>(n / 2);
      int32_t left = parse_checked(plan, plan_len, b, first, half);
      int32_t right = parse_checked(plan, plan_len, b, half, last);
      check(left != DSPARK_BAD_PLAN && right != DSPARK_BAD_PLAN, "a plan read, then refused");
    }
    return code;
  }
  if (code == DSPARK_BAD_PLAN) {
    check(error[0] != '\0', "a plan refused without a message");
    return code;
  }
  check(code == DSPARK_DONE, error);
  check(array.length == n && array.n_children == schema.n_children, "the struct's shape");
  for (int64_t c = 0; c < array.n_children; ++c) check_child(schema.children[c], array.children[c], n);
  check_explained(&schema, &array, n);
  array.release(&array);
  schema.release(&schema);
  return code;
}

}  // namespace

#endif
