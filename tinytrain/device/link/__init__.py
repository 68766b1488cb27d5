"""Host side of the serial training link (device side: firmware/tt_link.c)."""
