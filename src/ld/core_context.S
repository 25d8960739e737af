/* The NGSI-LD core @context (v1.8), built into the binary so that nothing is
 * fetched to start. ld.c reads it through these two symbols. */
    .section .rodata
    .global cr_core_context_start
    .global cr_core_context_end
    .balign 16
cr_core_context_start:
    .incbin CORE_CONTEXT_FILE
cr_core_context_end:
    .byte 0
    .section .note.GNU-stack,"",@progbits
