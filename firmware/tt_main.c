/* Firmware entry point, the same on the host build, the QEMU twins and the boards: bring the
 * board up, reset the model, restore the newest checkpoint, then serve the serial link. */
#define TT_MODEL_ALIASES /* model.h's tt_* names, whatever the build's --prefix */
#include "model.h"
#include "tt_checkpoint.h"
#include "tt_link.h"
#include "tt_port.h"

int main(void) {
    uint32_t seq;
    tt_port_init();
    tt_init();
    if (tt_checkpoint_load(&seq) == 0) tt_link_boot_checkpoint = seq;
    tt_link_serve();
    return 0;
}
