// The core's slow path (see dspark_exact.h): exact.py's column walk over the tree that strict.py's `loads`
// gives (dspark_exact.h: CPython 3.11/3.12's json C scanner, Modules/_json.c, with strict.py's hooks and
// checks in their order), over one text. Only the bodies and contents the fast pass leaves come here, so
// clarity wins over speed: the tree is walked as exact.py walks the dict. Positions are bytes inside, code
// points in messages. Recursion is bounded: the depth rule is checked before parsing, and the parser stops
// at DSPARK_DEPTH_LIMIT levels anyway.

#include "dspark_exact.h"

#include <cmath>
#include <cstring>

#include "dspark_core.h"

namespace dspark_exact {

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {  // H. Hinnant's algorithm; 1970-01-01 is 0
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

namespace {

using detail::code_points;
using detail::display_path_push;

constexpr int64_t kMsMin = -62135596800000LL, kMsMax = 253402300799999LL;  // years 1..9999

const char* json_type(const JValue& v) {
  switch (v.type) {
    case JValue::NUL: return "null";
    case JValue::FALSE_: case JValue::TRUE_: return "boolean";
    case JValue::INT: case JValue::BIG: return "integer";
    case JValue::FLOAT: return "number";
    case JValue::STR: return "string";
    case JValue::ARR: return "array";
    case JValue::OBJ: return "object";
  }
  return "null";
}

// A member of an object, or null when absent (a JSON null is returned as a NUL value).
const JValue* member(const JValue& obj, std::string_view name) {
  for (size_t k = 0; k < obj.size(); ++k)
    if (obj.key(k) == name) return &obj.item(k);
  return nullptr;
}

bool is_none(const JValue* v) { return !v || v->type == JValue::NUL; }

// -- datetime.fromisoformat (CPython 3.11/3.12's _datetimemodule.c) --------------------------------------------


void civil_from_days(int64_t z, int& y, int& m, int& d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t yy = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  y = static_cast<int>(yy + (m <= 2));
}

bool is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int days_in_month(int y, int m) {
  static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return dim[m - 1] + (m == 2 && is_leap(y));
}

bool is_digit(char c) { return static_cast<unsigned>(c - '0') < 10; }

const char* parse_digits(const char* ptr, int* var, size_t num_digits) {
  for (size_t i = 0; i < num_digits; ++i) {
    unsigned tmp = static_cast<unsigned>(*(ptr++) - '0');
    if (tmp > 9) return nullptr;
    *var = *var * 10 + static_cast<int>(tmp);
  }
  return ptr;
}

// Monday = 0
int weekday_of(int64_t days) { return static_cast<int>(((days % 7) + 7 + 3) % 7); }

int iso_to_ymd(int iso_year, int iso_week, int iso_day, int* year, int* month, int* day) {
  if (iso_year < 1 || iso_year > 9999) return -4;
  if (iso_week <= 0 || iso_week >= 53) {
    bool out_of_range = true;
    if (iso_week == 53) {
      int first_weekday = weekday_of(days_from_civil(iso_year, 1, 1));  // Monday 0
      if (first_weekday == 3 || (first_weekday == 2 && is_leap(iso_year))) out_of_range = false;
    }
    if (out_of_range) return -2;
  }
  if (iso_day <= 0 || iso_day >= 8) return -3;
  int64_t jan4 = days_from_civil(iso_year, 1, 4);
  int64_t monday = jan4 - weekday_of(jan4);
  civil_from_days(monday + (iso_week - 1) * 7 + iso_day - 1, *year, *month, *day);
  return 0;
}

int parse_isoformat_date(const char* dtstr, size_t len, int* year, int* month, int* day) {
  const char* p = parse_digits(dtstr, year, 4);
  if (!p) return -1;
  const bool uses_separator = *p == '-';
  if (uses_separator) ++p;
  if (*p == 'W') {
    ++p;
    int iso_week = 0, iso_day = 0;
    p = parse_digits(p, &iso_week, 2);
    if (!p) return -3;
    if (static_cast<size_t>(p - dtstr) < len) {
      if (uses_separator && *(p++) != '-') return -2;
      p = parse_digits(p, &iso_day, 1);
      if (!p) return -4;
    } else {
      iso_day = 1;
    }
    int rv = iso_to_ymd(*year, iso_week, iso_day, year, month, day);
    return rv ? -3 + rv : 0;
  }
  p = parse_digits(p, month, 2);
  if (!p) return -1;
  if (uses_separator && *(p++) != '-') return -2;
  p = parse_digits(p, day, 2);
  return p ? 0 : -1;
}

int parse_hh_mm_ss_ff(const char* tstr, const char* tstr_end, int* hour, int* minute, int* second,
                      int* microsecond) {
  *hour = *minute = *second = *microsecond = 0;
  const char* p = tstr;
  const char* p_end = tstr_end;
  int* vals[3] = {hour, minute, second};
  bool has_separator = true;
  for (size_t i = 0; i < 3; ++i) {
    p = parse_digits(p, vals[i], 2);
    if (!p) return -3;
    char c = *(p++);
    if (i == 0) has_separator = c == ':';
    if (p >= p_end) {
      return c != '\0';
    } else if (has_separator && c == ':') {
      continue;
    } else if (c == '.' || c == ',') {
      break;
    } else if (!has_separator) {
      --p;
    } else {
      return -4;
    }
  }
  size_t len_remains = static_cast<size_t>(p_end - p);
  size_t to_parse = len_remains >= 6 ? 6 : len_remains;
  p = parse_digits(p, microsecond, to_parse);
  if (!p) return -3;
  static const int correction[] = {100000, 10000, 1000, 100, 10};
  if (to_parse < 6) *microsecond *= correction[to_parse - 1];
  while (is_digit(*p)) ++p;
  return *p != '\0';
}

int parse_isoformat_time(const char* dtstr, size_t dtlen, int* hour, int* minute, int* second, int* microsecond,
                         int* tzoffset, int* tzmicrosecond) {
  const char* p = dtstr;
  const char* p_end = dtstr + dtlen;
  const char* tzinfo_pos = p;
  do {
    if (*tzinfo_pos == 'Z' || *tzinfo_pos == '+' || *tzinfo_pos == '-') break;
  } while (++tzinfo_pos < p_end);
  int rv = parse_hh_mm_ss_ff(dtstr, tzinfo_pos, hour, minute, second, microsecond);
  if (rv < 0) return rv;
  if (tzinfo_pos == p_end) return rv == 1 ? -5 : 0;
  if (*tzinfo_pos == 'Z') {
    *tzoffset = 0;
    *tzmicrosecond = 0;
    return *(tzinfo_pos + 1) != '\0' ? -5 : 1;
  }
  int tzsign = *tzinfo_pos == '-' ? -1 : 1;
  ++tzinfo_pos;
  int tzhour = 0, tzminute = 0, tzsecond = 0;
  rv = parse_hh_mm_ss_ff(tzinfo_pos, p_end, &tzhour, &tzminute, &tzsecond, tzmicrosecond);
  *tzoffset = tzsign * ((tzhour * 3600) + (tzminute * 60) + tzsecond);
  *tzmicrosecond *= tzsign;
  return rv ? -5 : 1;
}

int64_t find_separator(const char* dtstr, size_t len) {
  if (len == 7) return 7;
  if (dtstr[4] == '-') {
    if (dtstr[5] == 'W') {
      if (len < 8) return -1;
      if (len > 8 && dtstr[8] == '-') {
        if (len == 9) return -1;
        if (len > 10 && is_digit(dtstr[10])) return 8;
        return 10;
      }
      return 8;
    }
    return 10;
  }
  if (dtstr[4] == 'W') {
    size_t idx = 7;
    for (; idx < len; ++idx)
      if (!is_digit(dtstr[idx])) break;
    if (idx < 9) return static_cast<int64_t>(idx);
    return idx % 2 == 0 ? 7 : 8;
  }
  return 8;
}

// datetime.fromisoformat(text) as epoch microseconds (UTC; a naive value is taken as UTC); false where
// Python raises ValueError.
bool fromisoformat(std::string_view text, int64_t& micros) {
  if (code_points(text, text.size()) < 7) return false;
  std::string copy(text);  // NUL-terminated, as the C code reads it
  const char* dt = copy.c_str();
  size_t len = copy.size();
  int64_t sep = find_separator(dt, len);
  if (sep < 0) return false;  // a negative length: parse_isoformat_date fails at once on these inputs
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, us = 0, tzoffset = 0, tzus = 0;
  int rv = parse_isoformat_date(dt, static_cast<size_t>(sep), &year, &month, &day);
  if (!rv && len > static_cast<size_t>(sep)) {
    const char* p = dt + sep;
    unsigned char lead = static_cast<unsigned char>(p[0]);
    if ((lead & 0x80) == 0)
      p += 1;
    else if ((lead & 0xF0) == 0xE0)
      p += 3;
    else if ((lead & 0xF0) == 0xF0)
      p += 4;
    else
      p += 2;
    if (p > dt + len) return false;
    rv = parse_isoformat_time(p, len - static_cast<size_t>(p - dt), &hour, &minute, &second, &us, &tzoffset, &tzus);
  }
  if (rv < 0) return false;
  if (year < 1 || year > 9999 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month)) return false;
  if (hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59 || us < 0 || us > 999999)
    return false;
  int64_t offset_us = 0;
  if (rv == 1 && tzoffset != 0) {  // tzinfo_from_isoformat_results: whole seconds of 0 are UTC, whatever follows
    offset_us = static_cast<int64_t>(tzoffset) * 1000000 + tzus;
    if (offset_us <= -86400000000LL || offset_us >= 86400000000LL) return false;  // timezone() refuses it
  }
  int64_t seconds = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
                    hour * 3600 + minute * 60 + second;
  micros = seconds * 1000000 + us - offset_us;
  return true;
}

// -- exact.py's column walk --------------------------------------------------------------------------------------

struct Walker {
  Unit unit;
  Rejection& why;

  bool reject(std::string reason, std::string field, int category) {
    why.reason = std::move(reason);
    why.field = std::move(field);
    why.has_field = true;
    why.category = category;
    return false;
  }

  static std::string display(const std::vector<std::string>& path, size_t from = 0, size_t to = std::string::npos) {
    std::string out;
    for (size_t k = from; k < path.size() && k < to; ++k) {
      const std::string& segment = path[k];
      if (segment == "0" || segment == "*")
        out += "[" + segment + "]";
      else
        display_path_push(out, segment);
    }
    return out;
  }

  // _walk: `done` holds the segments walked (the error's field).
  bool walk(const JValue* node, const std::vector<std::string>& path, size_t from, size_t to,
            std::vector<std::string>& done, const JValue*& result) {
    for (size_t k = from; k < to; ++k) {
      if (is_none(node)) {
        result = nullptr;
        return true;
      }
      const std::string& segment = path[k];
      if (segment == "0") {
        if (node->type != JValue::ARR)
          return reject(std::string("wrong type: expected array, got ") + json_type(*node), display(done),
                        DSPARK_WRONG_TYPE);
        node = node->size() == 0 ? nullptr : &node->item(0);
      } else {
        if (node->type != JValue::OBJ)
          return reject(std::string("wrong type: expected object, got ") + json_type(*node), display(done),
                        DSPARK_WRONG_TYPE);
        node = member(*node, segment);
      }
      done.push_back(segment);
    }
    result = is_none(node) ? nullptr : node;
    return true;
  }

  bool integer(const JValue& v, const std::string& where, int64_t& out) {
    if (v.type == JValue::INT) {
      out = v.i;
      return true;
    }
    if (v.type == JValue::BIG) return reject("out of range for a 64-bit integer", where, DSPARK_OUT_OF_RANGE);
    if (v.type != JValue::FLOAT)
      return reject(std::string("wrong type: expected integer, got ") + json_type(v), where, DSPARK_WRONG_TYPE);
    double d = v.d;
    if (std::floor(d) != d) {
      std::string shown;
      write_double(shown, d);
      return reject("wrong type: expected integer, got number " + shown, where, DSPARK_WRONG_TYPE);
    }
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      return reject("out of range for a 64-bit integer", where, DSPARK_OUT_OF_RANGE);
    out = static_cast<int64_t>(d);
    return true;
  }

  bool timestamp(const JValue& v, const std::string& where, int64_t& ms) {
    std::string shown;
    if (unit == ISO) {
      if (v.type != JValue::STR)
        return reject(std::string("wrong type: expected an ISO-8601 string, got ") + json_type(v), where,
                      DSPARK_WRONG_TYPE);
      int64_t micros;
      const std::string_view text = v.str();
      if (!fromisoformat(text, micros)) {
        size_t cut = 0;
        for (size_t count = 0; cut < text.size() && count < 40; ++count) {
          ++cut;
          while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) ++cut;
        }
        return reject("not an ISO-8601 timestamp: " + py_repr(text.substr(0, cut)), where, DSPARK_WRONG_TYPE);
      }
      ms = micros >= 0 ? micros / 1000 : -((-micros + 999) / 1000);
      shown = text;
    } else {
      int64_t number;
      if (!integer(v, where, number)) return false;
      __int128 wide = unit == SECONDS ? static_cast<__int128>(number) * 1000 : number;
      if (wide < kMsMin || wide > kMsMax) {
        if (v.type == JValue::FLOAT)
          write_double(shown, v.d);
        else
          shown = std::to_string(v.i);
        return reject("out of range: " + shown + (unit == SECONDS ? " (seconds)" : " (millis)") +
                          " is not within years 1..9999",
                      where, DSPARK_OUT_OF_RANGE);
      }
      ms = static_cast<int64_t>(wide);
      return true;
    }
    if (ms < kMsMin || ms > kMsMax)
      return reject("out of range: " + shown + " (iso) is not within years 1..9999", where, DSPARK_OUT_OF_RANGE);
    return true;
  }

  // _leaf
  bool leaf(const JValue* v, Kind kind, const std::string& where, Scalar& out) {
    out = Scalar{};
    if (is_none(v)) return true;
    switch (kind) {
      case STRING:
        if (v->type == JValue::STR) {
          out.tag = Scalar::STR;
          out.s = v->str();
          return true;
        }
        break;
      case INTEGER:
        out.tag = Scalar::INT;
        return integer(*v, where, out.i);
      case NUMBER:
        if (v->type == JValue::INT || v->type == JValue::BIG || v->type == JValue::FLOAT) {
          out.tag = Scalar::DBL;
          out.d = v->type == JValue::INT   ? static_cast<double>(v->i)
                  : v->type == JValue::BIG ? c_strtod(std::string(v->str()))
                                           : v->d;
          return true;
        }
        break;
      case BOOLEAN:
        if (v->type == JValue::TRUE_ || v->type == JValue::FALSE_) {
          out.tag = Scalar::BOOL;
          out.b = v->type == JValue::TRUE_;
          return true;
        }
        break;
      case ANY:
        if (v->type == JValue::STR) {
          out.tag = Scalar::STR;
          out.s = v->str();
          return true;
        }
        if (v->type == JValue::INT || v->type == JValue::BIG) {
          int64_t i;
          if (!integer(*v, where, i)) return false;
          out.tag = Scalar::STR;
          out.s = std::to_string(i);
          return true;
        }
        break;
      case TIMESTAMP:
        out.tag = Scalar::INT;
        return timestamp(*v, where, out.i);
      default:
        break;
    }
    const char* expected = kind == ANY       ? "integer or string"
                           : kind == STRING  ? "string"
                           : kind == NUMBER  ? "number"
                           : kind == BOOLEAN ? "boolean"
                                             : "integer";
    out = Scalar{};
    return reject(std::string("wrong type: expected ") + expected + ", got " + json_type(*v), where,
                  DSPARK_WRONG_TYPE);
  }

  // _column_value
  bool column(const JValue& obj, const ColumnSpec& c, Cell& cell) {
    cell = Cell{};
    std::vector<std::string> done;
    const JValue* v;
    if (c.kind == LENGTH) {
      if (!walk(&obj, c.paths[0], 0, c.paths[0].size(), done, v)) return false;
      if (!v) return true;
      if (v->type != JValue::ARR)
        return reject(std::string("wrong type: expected array, got ") + json_type(*v), display(done),
                      DSPARK_WRONG_TYPE);
      cell.value.tag = Scalar::INT;
      cell.value.i = static_cast<int64_t>(v->size());
      return true;
    }
    if (c.star < 0) {
      for (const auto& path : c.paths) {
        done.clear();
        Scalar value;
        if (!walk(&obj, path, 0, path.size(), done, v) || !leaf(v, c.kind, display(path), value)) return false;
        if (cell.value.tag == Scalar::NONE) cell.value = std::move(value);
      }
      return true;
    }
    const size_t star = static_cast<size_t>(c.star);
    const JValue* items;
    if (!walk(&obj, c.paths[0], 0, star, done, items)) return false;
    if (!items) return true;
    if (items->type != JValue::ARR)
      return reject(std::string("wrong type: expected array, got ") + json_type(*items), display(done),
                    DSPARK_WRONG_TYPE);
    cell.present = true;
    for (size_t i = 0; i < items->size(); ++i) {
      Scalar element;
      for (const auto& path : c.paths) {
        std::vector<std::string> where(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(star));
        where.push_back(std::to_string(i));
        Scalar value;
        if (!walk(&items->item(i), path, star + 1, path.size(), where, v) || !leaf(v, c.kind, display(path), value))
          return false;
        if (element.tag == Scalar::NONE) element = std::move(value);
      }
      cell.items.push_back(std::move(element));
    }
    return true;
  }
};

// exact.py's _shown: an error response's detail as its message prints it (a string as it is, an integer in
// decimal, anything else as compact JSON text).
std::string shown(const JValue& v) {
  if (v.type == JValue::STR || v.type == JValue::BIG) return std::string(v.str());
  if (v.type == JValue::INT) return std::to_string(v.i);
  std::string out;
  json_text(out, v);
  return out;
}

bool truthy(const JValue& v) {
  switch (v.type) {
    case JValue::NUL: case JValue::FALSE_: return false;
    case JValue::TRUE_: case JValue::BIG: return true;
    case JValue::INT: return v.i != 0;
    case JValue::FLOAT: return v.d != 0;
    case JValue::STR: case JValue::ARR: case JValue::OBJ: return v.n != 0;
  }
  return false;
}

// exact.py's body_values: the error response check, then each column in order.
bool body_values(const JValue& obj, const std::vector<ColumnSpec>& columns, Unit unit, std::vector<Cell>& cells,
                 Rejection& why) {
  const JValue* error = member(obj, "error");
  const JValue* object = member(obj, "object");
  bool has_error = !is_none(error);
  if (has_error || (object && object->type == JValue::STR && object->str() == "error")) {
    // The detail: the error object, the body itself, or {"message": error} for an error that is no object
    // (read here as no type, no code, and the error as the message).
    const JValue* detail = !has_error ? &obj : error->type == JValue::OBJ ? error : nullptr;
    std::string parts;
    for (const char* k : {"type", "code"}) {
      const JValue* part = detail ? member(*detail, k) : nullptr;
      if (is_none(part)) continue;
      if (!parts.empty()) parts += ", ";
      parts += std::string(k) + "=" + shown(*part);
    }
    const JValue* message = detail ? member(*detail, "message") : error;
    why.reason = "error response" + (parts.empty() ? "" : " (" + parts + ")") +
                 (message && truthy(*message) ? ": " + shown(*message) : "");
    why.has_field = has_error;
    why.field = has_error ? "error" : "";
    why.category = DSPARK_ERROR_RESPONSE;
    return false;
  }
  Walker walker{unit, why};
  cells.resize(columns.size());
  for (size_t c = 0; c < columns.size(); ++c)
    if (!walker.column(obj, columns[c], cells[c])) return false;
  return true;
}

// The offset of the first byte Python's UTF-8 decoder stops at (exc.start), or npos.
size_t utf8_error(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + 1 >= n) return i;
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= n) return i;
      unsigned char ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

bool load_json_object(std::string_view text, Doc& doc, Rejection& why) {
  if (!loads(text, doc, why)) return false;
  const JValue& value = doc.root;
  if (value.type != JValue::OBJ) {
    why.reason = std::string("not a JSON object: got ") + json_type(value);
    why.has_field = false;
    why.category = DSPARK_NOT_OBJECT;
    return false;
  }
  return true;
}

}  // namespace

bool decode_body(std::string_view raw, const std::vector<ColumnSpec>& columns, Unit unit, std::vector<Cell>& cells,
                 Rejection& why) {
  size_t bad = utf8_error(raw);
  if (bad != std::string_view::npos) {
    static const char hex[] = "0123456789abcdef";
    unsigned char b = static_cast<unsigned char>(raw[bad]);
    why.reason = std::string("invalid UTF-8: byte 0x") + hex[b >> 4] + hex[b & 15] + " at offset " +
                 std::to_string(bad);
    why.has_field = false;
    why.category = DSPARK_NOT_JSON;
    return false;
  }
  Doc doc;
  if (!load_json_object(raw, doc, why)) {
    if (why.reason == "empty") why.reason = "empty body";
    return false;
  }
  return body_values(doc.root, columns, unit, cells, why);
}

bool json_content_values(std::string_view text, const std::vector<PropertySpec>& properties, std::vector<Cell>& cells,
                         std::string& error) {
  cells.assign(properties.size(), Cell{});
  Doc doc;
  Rejection why;
  if (!load_json_object(text, doc, why)) {
    if (why.has_field)
      error = "property '" + why.field + "': " + why.reason;
    else
      error = why.reason == "empty" ? "empty content" : why.reason;
    return true;
  }
  bool failed = false;
  Walker walker{SECONDS, why};
  for (size_t k = 0; k < properties.size(); ++k) {
    const PropertySpec& prop = properties[k];
    const JValue* v = member(doc.root, prop.name);
    if (is_none(v)) continue;
    Cell& cell = cells[k];
    bool ok = true;
    if (prop.kind == JSON) {
      cell.value.tag = Scalar::STR;
      json_text(cell.value.s, *v);
    } else if (prop.kind == ARRAY) {
      if (v->type != JValue::ARR) {
        ok = walker.reject(std::string("wrong type: expected array, got ") + json_type(*v), prop.name,
                           DSPARK_WRONG_TYPE);
      } else {
        for (size_t i = 0; ok && i < v->size(); ++i) {
          Scalar item;
          ok = walker.leaf(&v->item(i), prop.item_kind, prop.name + "[" + std::to_string(i) + "]", item);
          cell.items.push_back(std::move(item));
        }
        cell.present = ok;
        if (!ok) cell.items.clear();
      }
    } else {
      ok = walker.leaf(v, prop.kind, prop.name, cell.value);
    }
    if (!ok) {
      cell = Cell{};
      if (!failed) error = "property '" + why.field + "': " + why.reason;
      failed = true;
    }
  }
  return failed;
}

}  // namespace dspark_exact
