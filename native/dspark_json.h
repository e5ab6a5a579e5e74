// strict.py's `loads` and `json_text` in C++ (dspark_json.cpp): CPython 3.11/3.12's `json` C scanner
// (Modules/_json.c) with strict.py's hooks and checks in their order, and Python's compact json.dumps. The one
// JSON reader of the core's slow path (dspark_exact.cpp: bodies and contents) and of x-extract's `json`
// values (dspark_extract.cpp). A text becomes a small tree: objects as Python dicts (a repeated name keeps its
// first place and its last value). Internal to the core; nothing here throws but std::bad_alloc.
#ifndef DSPARK_JSON_H
#define DSPARK_JSON_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dspark_exact {

// Why the reference rejects a text; `category` is the core's verdict code (DSPARK_*) for it.
struct Rejection {
  std::string reason, field;
  bool has_field = false;
  int category = 0;
};

// A JSON value as strict.py's loads gives it, in 16 bytes: its strings and child values live in the Doc that
// loads filled. (A value was ~100 bytes with a std::string and two vectors of its own: a body of small values
// took 110 MB a MiB; benchmarks/bench_slow_path.py.)
struct JValue {
  enum Type : uint8_t { NUL, FALSE_, TRUE_, INT, BIG, FLOAT, STR, ARR, OBJ } type = NUL;
  bool surrogate = false;  // STR: holds an unpaired surrogate (kept as its 3 bytes, WTF-8)
  uint32_t n = 0;          // STR, BIG: the text's bytes; ARR: the elements; OBJ: the members
  union {
    int64_t i = 0;
    double d;
    const char* text;    // STR: the text; BIG: the digits (an integer beyond int64, within a double)
    const JValue* kids;  // ARR: the elements; OBJ: a name (a STR) and its value for each member, in order
  };

  std::string_view str() const { return {text, n}; }  // STR, BIG
  size_t size() const { return n; }                   // ARR, OBJ
  // ARR: element k; OBJ: the value of member k (a repeated name keeps its first place and its last value)
  const JValue& item(size_t k) const { return type == OBJ ? kids[2 * k + 1] : kids[k]; }
  std::string_view key(size_t k) const { return kids[2 * k].str(); }  // OBJ: the name of member k
};
static_assert(sizeof(JValue) == 16, "a value is 16 bytes");

// What one loads() read: the root value and the memory of every string and child array below it, freed together.
class Doc {
 public:
  Doc() = default;
  Doc(const Doc&) = delete;
  Doc& operator=(const Doc&) = delete;

  JValue root;

  const char* store(std::string_view s);                     // a copy, with a NUL after it
  const JValue* store(const JValue* values, size_t count);  // a copy

 private:
  void* take(size_t bytes);
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* at_ = nullptr;
  size_t left_ = 0;
  size_t next_ = 512;  // the next block's size: doubling up to 64 KiB (a small body takes little)
};

// strict.py's loads(text): the value in doc.root (true), or why not (false; `category` of the reasons: the
// core's verdicts).
bool loads(std::string_view text, Doc& doc, Rejection& why);

// json.dumps(value, ensure_ascii=False, separators=(",", ":")) of a loaded value, appended to `out`.
void json_text(std::string& out, const JValue& v);

// loads(text), its value appended to `out` as json_text writes it (true), or why not (false).
bool compact_json(std::string_view text, std::string& out, Rejection& why);

// Python's json.dumps of a string (ensure_ascii=False) and of a float (repr), appended to `out`.
void write_string(std::string& out, std::string_view s);
void write_double(std::string& out, double d);

// Python's repr() of a str (UTF-8, surrogates as their 3 bytes): the quote it picks, backslash escapes, and
// non-printable characters (Python 3.11's str.isprintable, dspark_unprintable.h) as \x, \u, \U.
std::string py_repr(std::string_view s);

// strtod in the C locale (Python's float() does not follow the process's locale; neither may this).
double c_strtod(const std::string& text);

namespace detail {
// Code points in s[0, end): a byte position as a message gives it.
size_t code_points(std::string_view s, size_t end);
// `out` (a display path, as exact.py's `_display` writes it) with one more name.
void display_path_push(std::string& out, std::string_view name);
}  // namespace detail

}  // namespace dspark_exact

#endif
