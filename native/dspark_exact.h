// The core's slow path (dspark_exact.cpp): the reference (connector/decode/exact.py over strict.py's
// `loads`, which is CPython 3.11/3.12's `json` scanner) rewritten in C++, for the bodies and contents the
// fast pass of dspark_core.cpp leaves. It gives what the reference gives, byte for byte: a row's values, or
// the error's reason and field. Internal to the core (not part of its C ABI); nothing here throws but
// std::bad_alloc, which the core's entry point catches.
#ifndef DSPARK_EXACT_H
#define DSPARK_EXACT_H

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dspark_exact {

// The same order as the core's kinds.
enum Kind : uint8_t { STRING, INTEGER, NUMBER, BOOLEAN, ANY, LENGTH, TIMESTAMP, JSON, ARRAY };
enum Unit : uint8_t { SECONDS, MILLIS, ISO };

struct ColumnSpec {
  Kind kind;
  std::vector<std::vector<std::string>> paths;
  int star = -1;  // where "*" is in the paths (a list column), -1 for none (and for a length column)
};

struct PropertySpec {
  std::string name;
  Kind kind;       // ARRAY: a list of `item_kind`
  Kind item_kind;
};

// One value of a column: null, a string (also a JSON-kind value's text), an int64 (integer, length, `any`
// read from an integer is its decimal text, timestamp in epoch ms), a double or a boolean.
struct Scalar {
  enum Tag : uint8_t { NONE, STR, INT, DBL, BOOL } tag = NONE;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
};

struct Cell {
  bool present = false;  // for a list column: the list is there (else null)
  Scalar value;          // a scalar column
  std::vector<Scalar> items;
};

// Why the reference rejects a text; `category` is the core's verdict code (DSPARK_*) for it.
struct Rejection {
  std::string reason, field;
  bool has_field = false;
  int category = 0;
};

// exact.py's decode_body: the body's bytes -> one cell per column (true), or why not (false).
bool decode_body(std::string_view raw, const std::vector<ColumnSpec>& columns, Unit unit, std::vector<Cell>& cells,
                 Rejection& why);

// exact.py's json_content_values: a content (valid UTF-8) -> one cell per property, and true with `error`
// when the reference writes a content_error.
bool json_content_values(std::string_view text, const std::vector<PropertySpec>& properties, std::vector<Cell>& cells,
                         std::string& error);

// Python's json.dumps(s, ensure_ascii=False) of a string: '"', '\\' and control characters escaped.
inline void write_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (u < 0x20) {
          out.append("\\u00");
          out.push_back(hex[u >> 4]);
          out.push_back(hex[u & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Python's repr of a float: the shortest digits that read back as the same double, in fixed notation when
// the decimal point falls within -4 < decpt <= 16 (with ".0" when integral), else d.ddde+XX.
inline void write_double(std::string& out, double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view t(buf, static_cast<size_t>(r.ptr - buf));
  if (!t.empty() && t[0] == '-') {
    out.push_back('-');
    t.remove_prefix(1);
  }
  size_t e = t.find('e');
  std::string digits(1, t[0]);
  if (e > 1) digits.append(t.substr(2, e - 2));
  int exponent = 0;
  std::from_chars(t.data() + e + (t[e + 1] == '+' ? 2 : 1), t.data() + t.size(), exponent);
  int decpt = exponent + 1;
  int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out.push_back('e');
    out.push_back(exponent < 0 ? '-' : '+');
    int a = exponent < 0 ? -exponent : exponent;
    if (a < 10) out.push_back('0');
    out.append(std::to_string(a));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt < n) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  } else {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  }
}

}  // namespace dspark_exact

#endif
