// How wide loads and alignment set a matrix-vector product's speed (bench/RESULTS.md, fourth
// session of 2026-11-27): a 4096x4096 f32 matrix times a vector, rows split over THREADS.
//   gcc -O2 -mavx512f -mfma bench/matvec_loads.c -o /tmp/mv -lpthread
//   /tmp/mv MODE THREADS [MISALIGN]   MODE 0: 512-bit loads, 4 accumulators; 1: 128-bit loads,
//   4 accumulators (the JIT's loop); 2: 4 rows at a time, 512-bit. MISALIGN 1 offsets the matrix
//   by 16 bytes (glibc's large blocks), 2 the vector.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#define N 4096
static float *A,*X,*Y; static int mode;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void rows(int r0,int r1){
  for(int i=r0;i<r1;i+=(mode==2?4:1)){
    if(mode==0){ // avx512 1 row 4 acc
      __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0; const float*r=A+(size_t)i*N;
      for(int j=0;j<N;j+=64){a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+j),_mm512_loadu_ps(X+j),a0);a1=_mm512_fmadd_ps(_mm512_loadu_ps(r+j+16),_mm512_loadu_ps(X+j+16),a1);a2=_mm512_fmadd_ps(_mm512_loadu_ps(r+j+32),_mm512_loadu_ps(X+j+32),a2);a3=_mm512_fmadd_ps(_mm512_loadu_ps(r+j+48),_mm512_loadu_ps(X+j+48),a3);}
      Y[i]=_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0,a1),_mm512_add_ps(a2,a3)));
    } else if(mode==1){ // sse 4 acc
      __m128 a0=_mm_setzero_ps(),a1=a0,a2=a0,a3=a0; const float*r=A+(size_t)i*N;
      for(int j=0;j<N;j+=16){a0=_mm_fmadd_ps(_mm_loadu_ps(r+j),_mm_loadu_ps(X+j),a0);a1=_mm_fmadd_ps(_mm_loadu_ps(r+j+4),_mm_loadu_ps(X+j+4),a1);a2=_mm_fmadd_ps(_mm_loadu_ps(r+j+8),_mm_loadu_ps(X+j+8),a2);a3=_mm_fmadd_ps(_mm_loadu_ps(r+j+12),_mm_loadu_ps(X+j+12),a3);}
      __m128 s=_mm_add_ps(_mm_add_ps(a0,a1),_mm_add_ps(a2,a3)); float t[4]; _mm_storeu_ps(t,s); Y[i]=t[0]+t[1]+t[2]+t[3];
    } else { // 4 rows jammed avx512
      __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0; const float*r=A+(size_t)i*N;
      for(int j=0;j<N;j+=16){__m512 x=_mm512_loadu_ps(X+j);a0=_mm512_fmadd_ps(_mm512_loadu_ps(r+j),x,a0);a1=_mm512_fmadd_ps(_mm512_loadu_ps(r+N+j),x,a1);a2=_mm512_fmadd_ps(_mm512_loadu_ps(r+2*N+j),x,a2);a3=_mm512_fmadd_ps(_mm512_loadu_ps(r+3*N+j),x,a3);}
      Y[i]=_mm512_reduce_add_ps(a0);Y[i+1]=_mm512_reduce_add_ps(a1);Y[i+2]=_mm512_reduce_add_ps(a2);Y[i+3]=_mm512_reduce_add_ps(a3);
    }
  }
}
static void* th(void*p){rows(N/2,N);return 0;}
int main(int c,char**v){
  if(c<3){fprintf(stderr,"usage: %s MODE THREADS [MISALIGN]\n",v[0]);return 2;}
  mode=atoi(v[1]); int nt=atoi(v[2]); int mis=c>3?atoi(v[3]):0;
  A=(float*)aligned_alloc(64,(size_t)N*N*4+64)+(mis==1?4:0);
  X=(float*)aligned_alloc(64,N*4+64)+(mis==2?4:0);Y=aligned_alloc(64,N*4);
  for(size_t i=0;i<(size_t)N*N;i++)A[i]=1e-3f*(i%7);for(int i=0;i<N;i++)X[i]=1;
  double ts[200];
  for(int k=0;k<200;k++){double t0=now(); if(nt==2){pthread_t t;pthread_create(&t,0,th,0);rows(0,N/2);pthread_join(t,0);} else rows(0,N); ts[k]=now()-t0;}
  // median
  for(int a=0;a<200;a++)for(int b=a+1;b<200;b++)if(ts[b]<ts[a]){double q=ts[a];ts[a]=ts[b];ts[b]=q;}
  printf("mode %d threads %d: %.3f ms %.1f GB/s\n",mode,nt,ts[100]*1e3,(double)N*N*4/ts[100]/1e9);
}
