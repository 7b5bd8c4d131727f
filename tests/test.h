/* A small assertion kit for refit's tests. Each operand is evaluated once into a typed local
 * and both values are printed on failure; assertions are never compiled out. A test program
 * returns 0 on success, 77 (SKIP_RETURN_CODE) when it cannot run here, and aborts otherwise. */
#ifndef RF_TEST_H
#define RF_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RF_TEST_SKIP 77

#define RF_ASSERT_BASE(a, op, b, type, fmt)                                                        \
  do {                                                                                             \
    type const rf_a_ = (a);                                                                        \
    type const rf_b_ = (b);                                                                        \
    if (!(rf_a_ op rf_b_)) {                                                                       \
      fprintf(stderr, "%s:%d: assertion failed: %s %s %s (%" fmt " %s %" fmt ")\n", __FILE__,      \
              __LINE__, #a, #op, #b, rf_a_, #op, rf_b_);                                           \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#define ASSERT_EQ(a, b) RF_ASSERT_BASE(a, ==, b, int64_t, PRId64)
#define ASSERT_NE(a, b) RF_ASSERT_BASE(a, !=, b, int64_t, PRId64)
#define ASSERT_LE(a, b) RF_ASSERT_BASE(a, <=, b, int64_t, PRId64)
#define ASSERT_LT(a, b) RF_ASSERT_BASE(a, <, b, int64_t, PRId64)
#define ASSERT_GE(a, b) RF_ASSERT_BASE(a, >=, b, int64_t, PRId64)
#define ASSERT_GT(a, b) RF_ASSERT_BASE(a, >, b, int64_t, PRId64)
#define ASSERT_U64_EQ(a, b) RF_ASSERT_BASE(a, ==, b, uint64_t, PRIu64)
#define ASSERT_TRUE(a) ASSERT_NE(!!(a), 0)
#define ASSERT_FALSE(a) ASSERT_EQ(!!(a), 0)

#define ASSERT_STR_EQ(a, b)                                                                        \
  do {                                                                                             \
    const char *rf_sa_ = (a);                                                                      \
    const char *rf_sb_ = (b);                                                                      \
    if (strcmp(rf_sa_, rf_sb_) != 0) {                                                             \
      fprintf(stderr, "%s:%d: assertion failed: %s == %s (\"%s\" vs \"%s\")\n", __FILE__,          \
              __LINE__, #a, #b, rf_sa_, rf_sb_);                                                   \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#define ASSERT_STATUS(expr, expected)                                                              \
  do {                                                                                             \
    rf_status rf_got_ = (expr);                                                                    \
    rf_status rf_want_ = (expected);                                                               \
    if (rf_got_ != rf_want_) {                                                                     \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr,           \
              rf_status_name(rf_got_), rf_status_name(rf_want_));                                  \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#define ASSERT_OK(expr) ASSERT_STATUS(expr, RF_OK)

#endif
