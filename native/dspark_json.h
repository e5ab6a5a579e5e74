// strict.py's `loads` and `json_text` in C++ (dspark_json.cpp): CPython 3.11/3.12's `json` C scanner
// (Modules/_json.c) with strict.py's hooks and checks in their order, and Python's compact json.dumps. The one
// JSON reader of the core's slow path (dspark_exact.cpp: bodies and contents) and of x-extract's `json`
// values (dspark_extract.cpp). A text becomes a small tree: objects as Python dicts (a repeated name keeps its
// first place and its last value). Internal to the core; nothing here throws but std::bad_alloc.
#ifndef DSPARK_JSON_H
#define DSPARK_JSON_H

#include <cstdint>
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

// A JSON value as strict.py's loads gives it.
struct JValue {
  enum Type : uint8_t { NUL, FALSE_, TRUE_, INT, BIG, FLOAT, STR, ARR, OBJ } type = NUL;
  bool surrogate = false;  // STR: holds an unpaired surrogate (kept as its 3 bytes, WTF-8)
  int64_t i = 0;
  double d = 0;
  std::string s;                  // STR: the text; BIG: the digits (an integer beyond int64, within a double)
  std::vector<std::string> keys;  // OBJ: the names, in first-seen order
  std::vector<JValue> items;      // ARR: the elements; OBJ: the values, one per name
};

// strict.py's loads(text): the value (true), or why not (false; `category` of the reasons: the core's verdicts).
bool loads(std::string_view text, JValue& out, Rejection& why);

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
void display_path_push(std::string& out, const std::string& name);
}  // namespace detail

}  // namespace dspark_exact

#endif
