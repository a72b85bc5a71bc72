/* ferry-test-c-rows: sparse rows through the C API (worker/c_api.h), compiled as C, so
 * the header stays C. Runs as a worker (DMLC_* environment) beside others doing the
 * same: tensor "c.rows" [1000, 4] float32; each worker pushes row 7 twice and row
 * 100 + rank once, and checks the sums exactly; then a row id out of range must be
 * refused with a negative code and a message naming it. Prints "OK c api rows".
 * Exit codes: 0 as expected, 1 a Ferry error, 3 a wrong value or a missing error. */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "worker/c_api.h"

enum { kDim = 4, kRows = 3 };

static int Fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, ferry_last_error());
  return 1;
}

int main(void) {
  if (ferry_init() != 0) return Fail("ferry_init");
  const int rank = ferry_rank(), size = ferry_size();
  const int64_t shape[2] = {1000, kDim};
  if (ferry_declare_tensor("c.rows", 0, shape, 2) < 0) return Fail("ferry_declare_tensor");
  int64_t rows[kRows] = {7, 100 + rank, 7};
  float values[kRows * kDim], out[kRows * kDim];
  for (int j = 0; j < kRows; ++j) {
    for (int k = 0; k < kDim; ++k) values[j * kDim + k] = (float)(rank + 1 + k);
  }
  int64_t h = ferry_push_pull_rows_async("c.rows", rows, kRows, values, out, 0, 0, INT32_MIN);
  if (h <= 0) return Fail("ferry_push_pull_rows_async");
  if (ferry_wait(h) != 0) return Fail("ferry_wait");
  for (int k = 0; k < kDim; ++k) {
    float shared = 0; /* row 7: twice from every worker */
    for (int r = 0; r < size; ++r) shared += 2.0f * (float)(r + 1 + k);
    const float own = (float)(rank + 1 + k);
    if (out[k] != shared || out[2 * kDim + k] != shared || out[kDim + k] != own) {
      fprintf(stderr, "WRONG element %d: row 7 %g and %g (want %g), own row %g (want %g)\n", k,
              out[k], out[2 * kDim + k], shared, out[kDim + k], own);
      return 3;
    }
  }
  int64_t bad = 1000;
  int64_t refused = ferry_push_pull_rows_async("c.rows", &bad, 1, values, out, 0, 0, INT32_MIN);
  if (refused >= 0 || strstr(ferry_last_error(), "row id 1000") == NULL) {
    fprintf(stderr, "row id 1000 not refused: %lld, '%s'\n", (long long)refused,
            ferry_last_error());
    return 3;
  }
  printf("refused as expected: %s\nOK c api rows\n", ferry_last_error());
  fflush(stdout);
  return ferry_shutdown() == 0 ? 0 : Fail("ferry_shutdown");
}
