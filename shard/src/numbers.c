/* Redis's number formats depend on C's long double (x87 80-bit on x86-64)
 * and glibc's strtod/strtold; Rust has neither, so the few operations whose
 * exact digits clients see are done here, exactly as Redis does them. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LONG_DOUBLE_CHARS (5 * 1024)

/* Redis's string2ld. */
static int parse_long_double(const char *s, size_t len, long double *out) {
    char buf[MAX_LONG_DOUBLE_CHARS];
    char *eptr;
    long double value;
    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    value = strtold(buf, &eptr);
    if (isspace((unsigned char)buf[0]) || eptr[0] != '\0' || (size_t)(eptr - buf) != len ||
        (errno == ERANGE && (value == HUGE_VALL || value == -HUGE_VALL || fpclassify(value) == FP_ZERO)) ||
        isnan(value))
        return 0;
    *out = value;
    return 1;
}

/* Redis's string2d. Returns 1 and sets *out on success. */
int corekv_parse_double(const char *s, size_t len, double *out) {
    char buf[MAX_LONG_DOUBLE_CHARS];
    char *eptr;
    double value;
    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    value = strtod(buf, &eptr);
    if (isspace((unsigned char)buf[0]) || (size_t)(eptr - buf) != len ||
        (errno == ERANGE && (value == HUGE_VAL || value == -HUGE_VAL || fpclassify(value) == FP_ZERO)) ||
        isnan(value))
        return 0;
    *out = value;
    return 1;
}

static int format_human(long double value, char *out, size_t out_cap);

/* INCRBYFLOAT: `current` (NULL when the key is absent) plus `incr`, formatted
 * as Redis's ld2string(LD_STR_HUMAN). Returns the length written to `out`,
 * -1 when an operand is not a valid float, -2 when the result is NaN/inf. */
int corekv_incrbyfloat(const char *current, size_t current_len, const char *incr, size_t incr_len, char *out,
                       size_t out_cap) {
    long double value = 0, delta;
    if (current && !parse_long_double(current, current_len, &value)) return -1;
    if (!parse_long_double(incr, incr_len, &delta)) return -1;
    value += delta;
    if (isnan(value) || isinf(value)) return -2;
    return format_human(value, out, out_cap);
}

/* Redis's ld2string(LD_STR_HUMAN) of a finite long double: "%.17Lf" without
 * trailing zeros, "-0" as "0". Returns the length, -1 if it does not fit. */
static int format_human(long double value, char *out, size_t out_cap) {
    int len = snprintf(out, out_cap, "%.17Lf", value);
    if (len < 0 || (size_t)len + 1 > out_cap) return -1;
    if (strchr(out, '.') != NULL) {
        char *p = out + len - 1;
        while (*p == '0') {
            p--;
            len--;
        }
        if (*p == '.') len--;
    }
    if (len == 2 && out[0] == '-' && out[1] == '0') {
        out[0] = '0';
        len = 1;
    }
    return len;
}

/* addReplyHumanLongDouble's digits for a double (GEOPOS, WITHCOORD). */
int corekv_format_human(double value, char *out, size_t out_cap) {
    return format_human(value, out, out_cap);
}

/* Redis's "%.17g" double formatting (RESP2 bulk scores, RESP3 doubles). */
int corekv_format_double(double value, char *out, size_t out_cap) {
    return snprintf(out, out_cap, "%.17g", value);
}

/* zslParseRange's strtod (ZRANGEBYSCORE and friends): the argument up to its
 * first NUL, leading spaces allowed, overflow to +-inf accepted, only NaN and
 * trailing characters refused. Returns 1 and sets *out on success. */
int corekv_parse_range_double(const char *s, size_t len, double *out) {
    char stackbuf[128];
    char *buf = len < sizeof(stackbuf) ? stackbuf : malloc(len + 1);
    char *eptr;
    double value;
    int ok;
    if (buf == NULL) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    value = strtod(buf, &eptr);
    ok = eptr[0] == '\0' && !isnan(value);
    if (buf != stackbuf) free(buf);
    if (ok) *out = value;
    return ok;
}

/* SORT's score of an element or BY value: strtod up to the first NUL, then
 * nothing but the NUL, no ERANGE, no NaN. Returns 1 and sets *out when
 * valid; *out is set either way (Redis sorts with it and then errors). */
int corekv_sort_strtod(const char *s, size_t len, double *out) {
    char stackbuf[128];
    char *buf = len < sizeof(stackbuf) ? stackbuf : malloc(len + 1);
    char *eptr;
    int ok;
    if (buf == NULL) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    *out = strtod(buf, &eptr);
    ok = eptr[0] == '\0' && errno != ERANGE && !isnan(*out);
    if (buf != stackbuf) free(buf);
    return ok;
}

/* Redis 7.0's blocking timeout: seconds as long double, times 1000, rounded
 * up (ceill: 0.001 is 1 ms even where it parses a hair below, and any
 * positive timeout waits at least 1 ms, never for ever), cast to long long.
 * Returns 1 and sets *ms (LLONG_MIN when out of long long's range, as the
 * x86 conversion gives), 0 when not a float. */
int corekv_timeout_ms(const char *s, size_t len, long long *ms) {
    long double v;
    if (!parse_long_double(s, len, &v)) return 0;
    v = ceill(v * 1000.0L);
    if (!(v < 9223372036854775808.0L) || !(v > -9223372036854775808.0L)) {
        *ms = (-9223372036854775807LL - 1);
    } else {
        *ms = (long long)v;
    }
    return 1;
}
