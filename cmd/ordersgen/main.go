// Command ordersgen writes a TPC-H-like ORDERS sample as NDJSON for
// `warmcache load`: one line per order, {"key": o_orderkey, "value": {...}},
// with the columns of TPC-H's ORDERS table and values drawn the way dbgen
// draws them (statuses, priorities, clerks, dates from 1992-01-01 to
// 1998-08-02, prices, comments of random words). The output depends only on
// the flags, so a run is reproducible.
//
//	go run ./cmd/ordersgen -rows 100000 > orders.ndjson
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"
)

func main() {
	rows := flag.Int("rows", 100_000, "orders to write; TPC-H has 1,500,000 per scale factor")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if err := write(os.Stdout, *rows, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "ordersgen:", err)
		os.Exit(1)
	}
}

// order is one row of TPC-H's ORDERS, without its key.
type order struct {
	CustKey       int64   `json:"o_custkey"`
	OrderStatus   string  `json:"o_orderstatus"`
	TotalPrice    float64 `json:"o_totalprice"`
	OrderDate     string  `json:"o_orderdate"`
	OrderPriority string  `json:"o_orderpriority"`
	Clerk         string  `json:"o_clerk"`
	ShipPriority  int     `json:"o_shippriority"`
	Comment       string  `json:"o_comment"`
}

var (
	priorities = []string{"1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"}
	words      = strings.Fields(`furiously sly carefully blithely slyly quickly regular express final pending ironic
		special even bold silent unusual ideas deposits accounts packages requests instructions theodolites
		foxes pinto beans asymptotes dependencies platelets excuses warhorses courts dolphins sheaves
		about above according across after against along among around at before behind beneath beside
		besides between beyond by despite during except for from in inside instead of into near of on
		outside over past since through throughout to toward under until up upon without haggle nag
		sleep wake are was cajole use boost detect integrate maintain nod are engage believe doze`)
	startDate = time.Date(1992, 1, 1, 0, 0, 0, 0, time.UTC)
	dateSpan  = int(time.Date(1998, 8, 2, 0, 0, 0, 0, time.UTC).Sub(startDate).Hours() / 24)
)

func write(w io.Writer, rows int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	for i := 1; i <= rows; i++ {
		date := startDate.AddDate(0, 0, rng.IntN(dateSpan))
		status := "O"
		switch {
		case date.Before(time.Date(1995, 6, 17, 0, 0, 0, 0, time.UTC)):
			status = "F"
		case rng.IntN(10) == 0:
			status = "P"
		}
		var comment strings.Builder
		for comment.Len() < 19+rng.IntN(60) {
			if comment.Len() > 0 {
				comment.WriteByte(' ')
			}
			comment.WriteString(words[rng.IntN(len(words))])
		}
		o := order{
			CustKey:       1 + rng.Int64N(150_000),
			OrderStatus:   status,
			TotalPrice:    float64(90_000+rng.IntN(50_000_000)) / 100,
			OrderDate:     date.Format(time.DateOnly),
			OrderPriority: priorities[rng.IntN(len(priorities))],
			Clerk:         fmt.Sprintf("Clerk#%09d", 1+rng.IntN(1000)),
			Comment:       comment.String(),
		}
		if err := enc.Encode(struct {
			Key   int   `json:"key"`
			Value order `json:"value"`
		}{i, o}); err != nil {
			return err
		}
	}
	return bw.Flush()
}
