#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
// time a columns scatterv: root holds rows x width row-major, sends columns ranges to each rank
static double run(int rows, int width, int contiguous_pack) {
  int rank, size; MPI_Comm_rank(MPI_COMM_WORLD,&rank); MPI_Comm_size(MPI_COMM_WORLD,&size);
  int per = width / size;
  double *m = malloc(sizeof(double)*(size_t)rows*width), *blk = malloc(sizeof(double)*(size_t)rows*per);
  double *pack = malloc(sizeof(double)*(size_t)rows*width);
  for (size_t i=0;i<(size_t)rows*width;i++) m[i]=i;
  MPI_Datatype vec, col, block;
  MPI_Type_vector(rows,1,width,MPI_DOUBLE,&vec); MPI_Type_create_resized(vec,0,8,&col); MPI_Type_commit(&col);
  MPI_Type_contiguous(rows,MPI_DOUBLE,&block); MPI_Type_commit(&block);
  int *c=malloc(sizeof(int)*size),*d=malloc(sizeof(int)*size), *c2=malloc(sizeof(int)*size),*d2=malloc(sizeof(int)*size);
  for(int r=0;r<size;r++){c[r]=per; d[r]=r*per; c2[r]=per*rows; d2[r]=r*per*rows;}
  double best=1e9;
  for (int it=0; it<6; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t=MPI_Wtime();
    if (!contiguous_pack) {
      MPI_Scatterv(m,c,d,col,blk,per,block,0,MPI_COMM_WORLD);
    } else {
      if (rank==0) {
        // blocked transpose: for each rank's columns, pack column-major
        const int B=32;
        for (int r=0;r<size;r++) { double* out=pack+(size_t)r*per*rows; int c0=r*per;
          for (int rb=0; rb<rows; rb+=B) for (int cb=0; cb<per; cb+=B) {
            int re = rb+B<rows?rb+B:rows, ce = cb+B<per?cb+B:per;
            for (int cc=cb; cc<ce; cc++) for (int rr=rb; rr<re; rr++) out[(size_t)cc*rows+rr]=m[(size_t)rr*width+c0+cc];
          } }
      }
      MPI_Scatterv(pack,c2,d2,MPI_DOUBLE,blk,per*rows,MPI_DOUBLE,0,MPI_COMM_WORLD);
    }
    double e=MPI_Wtime()-t; double mx; MPI_Reduce(&e,&mx,1,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);
    if (rank==0 && it>0 && mx<best) best=mx;
  }
  // verify
  for (int cc=0; cc<per; cc+=7) for (int rr=0; rr<rows; rr+=5) if (blk[(size_t)cc*rows+rr] != m[(size_t)rr*width + rank*per+cc]) { printf("BAD\n"); exit(1);} 
  free(m); free(blk); free(pack);
  return best;
}
int main(int argc,char**argv){ MPI_Init(&argc,&argv); int rank; MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  int shapes[][2]={{437,4145},{1000,1000},{4145,437},{2048,2048},{200,8000}};
  for (int s=0;s<5;s++){ double a=run(shapes[s][0],shapes[s][1],0), b=run(shapes[s][0],shapes[s][1],1);
    if(rank==0) printf("%dx%d  datatype %.2f ms  packed %.2f ms  (%.1f MB)\n",shapes[s][0],shapes[s][1],a*1e3,b*1e3, shapes[s][0]*(double)shapes[s][1]*8/1e6);}
  MPI_Finalize();}
