package concurrency_test

import (
	"fmt"
	"log"
	"strconv"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-a9d410c6/concurrency"
)

// Two accounts and ten concurrent transfers: each runs in a software
// transaction that etcd retries when another changed what it read, so no
// transfer is lost and the total stays 200.
func ExampleNewSTM() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	for _, k := range []string{"/example/stm/a", "/example/stm/b"} {
		if _, err := cli.Put(cli.Ctx(), k, "100"); err != nil {
			log.Fatal(err)
		}
	}
	transfer := func(stm concurrency.STM) error {
		a, _ := strconv.Atoi(stm.Get("/example/stm/a"))
		b, _ := strconv.Atoi(stm.Get("/example/stm/b"))
		stm.Put("/example/stm/a", strconv.Itoa(a-10))
		stm.Put("/example/stm/b", strconv.Itoa(b+10))
		return nil
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := concurrency.NewSTM(cli, transfer, concurrency.WithIsolation(concurrency.Serializable)); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()

	resp, err := cli.Get(cli.Ctx(), "/example/stm/", clientv3.WithPrefix())
	if err != nil {
		log.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		fmt.Printf("%s = %s\n", kv.Key, kv.Value)
	}

	// Output:
	// /example/stm/a = 0
	// /example/stm/b = 200
}
