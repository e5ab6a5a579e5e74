// The core's slow path (dspark_exact.cpp): the reference (tests/oracle/exact.py over strict.py's
// `loads`, which is CPython 3.11/3.12's `json` scanner) rewritten in C++, for the bodies and contents the
// fast pass of dspark_core.cpp leaves. It gives what the reference gives, byte for byte: a row's values, or
// the error's reason and field. Internal to the core (not part of its C ABI); nothing here throws but
// std::bad_alloc, which the core's entry point catches.
#ifndef DSPARK_EXACT_H
#define DSPARK_EXACT_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dspark_core.h"
#include "dspark_json.h"

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

// exact.py's decode_body: the body's bytes -> one cell per column (true), or why not (false).
bool decode_body(std::string_view raw, const std::vector<ColumnSpec>& columns, Unit unit, std::vector<Cell>& cells,
                 Rejection& why);

// exact.py's json_content_values: a content (valid UTF-8) -> one cell per property, and true with `error`
// when the reference writes a content_error.
bool json_content_values(std::string_view text, const std::vector<PropertySpec>& properties, std::vector<Cell>& cells,
                         std::string& error);

// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm); the core's ISO reading uses it too.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);

}  // namespace dspark_exact

#endif
