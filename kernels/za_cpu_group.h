/*  za_cpu_group.h: cpu-staged's groups of processes (za_kernels.h's group_*
    slots) in shared memory. Internal to kernels/; not installed.          */
#ifndef ZA_CPU_GROUP_H_INCLUDED
#define ZA_CPU_GROUP_H_INCLUDED

#include <stddef.h>

int za_cpu_group_id (unsigned char *id);
void *za_cpu_group_open (const unsigned char *id, int rank, int size);
int za_cpu_group_sum (void *group, float *buf, size_t floats);
int za_cpu_group_poll (void *group);
void za_cpu_group_close (void *group);

#endif
