/* refit: moves resharded weights from a trainer layout into a rollout layout, measures the
 * transfer and proves it bit-exact. Everything lives in refit_lib; see src/driver. */
#include "driver/driver.h"

int main(int argc, char **argv) { return rf_driver_main(argc, argv); }
